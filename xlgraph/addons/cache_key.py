"""Exact cache keys for ``GraphCache``: two arguments get equal keys only when they make the
same graph.

A key is a tuple compared with ``==``, never a bare ``hash()`` or ``id()``: colliding hashes
(``hash(-1) == hash(-2)``) stay apart, and a key that needs an object's identity holds the object
itself, so its address cannot be reused by another object while the key lives.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Hashable
from typing import Any

import numpy as np

import xlgraph as popxl

__all__ = ["argument_key", "tensor_key", "is_module"]

# values whose ``==`` is exact within one type
_PLAIN = (bool, int, str, bytes, type(None), type(Ellipsis), range)


class _Same:
    """An object compared by identity; holding it keeps its address from being reused."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)


def is_module(value: Any) -> bool:
    """Whether ``value`` is an addons ``Module`` (``xlgraph.addons.module`` imports the cache):
    a popxl Module that makes its own graphs."""
    return isinstance(value, popxl.Module) and callable(getattr(value, "create_graph", None))


def tensor_key(t: popxl.Tensor | popxl.TensorSpec) -> tuple[Any, ...]:
    """Tensors with one spec (shape, dtype, meta shape) make the same graph."""
    spec = t.spec if isinstance(t, popxl.Tensor) else t
    return ("tensor", spec.shape, spec.dtype.name, tuple(spec.meta_shape))


def argument_key(arg: Any) -> Hashable:
    """The exact key of one argument.

    Tensors by spec; lists, tuples, dicts and sets by type and items; addons modules by class
    and every setting, private ones included (``_module_key``), or by the ``__hash__`` their
    class defines; numpy arrays and scalars by type, dtype, shape and bytes; floats by their bits
    (``0.0`` and ``-0.0`` differ); functions, classes, graphs and other objects without their
    own ``==`` by identity (held, so the address is not reused); other hashable objects by type
    and ``==``; other unhashable objects by type and attributes.
    """
    return _key(arg, [])


def _key(arg: Any, path: list[int]) -> Hashable:
    if isinstance(arg, popxl.Tensor | popxl.TensorSpec):
        return tensor_key(arg)
    if isinstance(arg, _PLAIN):
        return (type(arg), arg)
    if isinstance(arg, float):
        return (type(arg), float(arg).hex())
    if isinstance(arg, complex):
        return (type(arg), arg.real.hex(), arg.imag.hex())
    if isinstance(arg, np.ndarray | np.generic):
        return _array_key(arg, path)
    if id(arg) in path:  # a structure that contains itself: where the cycle closes
        return ("cycle", path.index(id(arg)))
    path.append(id(arg))
    try:
        return _container_key(arg, path)
    finally:
        path.pop()


def _array_key(arg: np.ndarray | np.generic, path: list[int]) -> Hashable:
    if arg.dtype.hasobject:
        return (type(arg), arg.dtype, np.shape(arg), _key(np.asarray(arg).tolist(), path))
    return (type(arg), arg.dtype, np.shape(arg), arg.tobytes())


def _container_key(arg: Any, path: list[int]) -> Hashable:
    if isinstance(arg, list | tuple):
        return (type(arg), tuple(_key(v, path) for v in arg))
    if isinstance(arg, dict):
        return (type(arg), tuple((_key(k, path), _key(v, path)) for k, v in arg.items()))
    if isinstance(arg, set | frozenset):
        return (type(arg), frozenset(_key(v, path) for v in arg))
    if is_module(arg):
        return _module_key(arg, path)
    try:
        hash(arg)
    except TypeError:  # unhashable: by its attributes, or its buffer, or itself
        return _unhashable_key(arg, path)
    # functions, classes, graphs and other objects hashed by identity are held, so their
    # address is not reused while the key lives; objects with their own ``==`` are taken at it
    return (type(arg), _Same(arg) if _by_identity(arg) else arg)


def _module_key(module: Any, path: list[int]) -> Hashable:
    """A module whose class defines ``__hash__`` is keyed by it, as popxl-addons keys modules:
    instances of equal hash share a graph, and a class that also defines ``__eq__`` decides
    with ``==`` (so colliding hashes, ``hash(-1) == hash(-2)``, stay apart). Any other module
    by its class and every attribute but ``Module``'s own records
    (``Module._record_attributes``): a private setting (``self._k``) counts, and a setting
    changed between two builds makes a new graph, while alike modules (two ``Linear(512)``)
    share one."""
    cls = type(module)
    if _user_defined(cls, "__hash__") and cls.__hash__ is not None:
        if _user_defined(cls, "__eq__"):
            return ("module", cls, module)
        return ("module", cls, "hash", hash(module))
    record = getattr(cls, "_record_attributes", frozenset())
    settings = {k: v for k, v in vars(module).items() if k not in record}
    return ("module", cls, _key(settings, path))


def _user_defined(cls: type, name: str) -> bool:
    """Whether ``cls`` takes method ``name`` from a class other than ``object`` and
    xlgraph's own."""
    owner = next(k for k in cls.__mro__ if name in vars(k))
    return owner is not object and owner.__module__.partition(".")[0] != "xlgraph"


def _unhashable_key(arg: Any, path: list[int]) -> Hashable:
    try:
        return (type(arg), "state", _key(vars(arg), path))
    except TypeError:
        pass
    try:
        return (type(arg), "buffer", memoryview(arg).tobytes())
    except TypeError:
        return (type(arg), _Same(arg))


def _by_identity(arg: Any) -> bool:
    return (inspect.isroutine(arg) or isinstance(arg, type | types.ModuleType)
            or type(arg).__eq__ is object.__eq__)
