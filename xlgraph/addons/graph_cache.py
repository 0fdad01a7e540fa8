"""``GraphCache``: one graph per function (or module) and argument signature."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import xlgraph as popxl
from xlgraph import ops

__all__ = ["GraphCache", "bound_arguments", "tensor_hash", "argument_hash", "get_function_hash",
           "function"]


def _is_module(value: Any) -> bool:
    """Whether ``value`` is an addons ``Module`` (``xlgraph.addons.module`` imports this
    module): a popxl Module that makes its own graphs."""
    return isinstance(value, popxl.Module) and callable(getattr(value, "create_graph", None))


def bound_arguments(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """``fn``'s parameters bound to these arguments, defaults applied."""
    target = fn.build if _is_module(fn) else fn
    bound = inspect.signature(target).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def tensor_hash(t: popxl.Tensor | popxl.TensorSpec) -> int:
    """Tensors with one spec (shape, dtype, meta shape) hash alike: they make the same graph."""
    spec = t.spec if isinstance(t, popxl.Tensor) else t
    return hash(("tensor", spec.shape, spec.dtype.name, tuple(spec.meta_shape)))


def argument_hash(arg: Any) -> int:
    """A hash of one argument: tensors by spec, containers by their items, modules by class and
    settings, other values by value (by identity when unhashable)."""
    if isinstance(arg, popxl.Tensor | popxl.TensorSpec):
        return tensor_hash(arg)
    if isinstance(arg, list | tuple):
        return hash((type(arg).__name__, *map(argument_hash, arg)))
    if isinstance(arg, dict):
        return hash(("dict", *((k, argument_hash(v)) for k, v in arg.items())))
    if _is_module(arg):
        settings = {k: v for k, v in vars(arg).items() if not k.startswith("_")}
        return hash((type(arg), argument_hash(settings)))
    try:
        return hash((type(arg), arg))
    except TypeError:
        return hash(("id", id(arg)))


def get_function_hash(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """The cache key of calling ``fn`` (a function or a module) with these arguments."""
    bound = bound_arguments(fn, *args, **kwargs)
    return hash((argument_hash(fn), *((k, argument_hash(v)) for k, v in bound.items())))


class GraphCache:
    """Create graphs once per function and argument signature.

    ``create_graph(module, ...)`` returns ``(factories, GraphWithNamedArgs)`` as
    ``Module.create_graph`` does; ``create_graph(fn, ...)`` returns a ``popxl.Graph``. A second
    request with the same function (or a module of the same class and settings) and arguments
    of the same specs returns the graph made the first time.
    """

    def __init__(self) -> None:
        self._cache: dict[tuple[int, int], Any] = {}

    def create_graph(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A cached graph of ``fn`` for these arguments (see the class)."""
        key = (popxl.gir().id, get_function_hash(fn, *args, **kwargs))
        if key not in self._cache:
            if _is_module(fn):
                self._cache[key] = fn.create_graph(*args, **kwargs)
            else:
                self._cache[key] = popxl.gir().create_graph(fn, *args, **kwargs)
        return self._cache[key]

    def __len__(self) -> int:
        return len(self._cache)


def function(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Make ``fn`` an outlined function: each call builds (once per signature) a graph of
    ``fn`` and calls it with the tensor arguments. Returns the output, or a tuple of outputs."""
    cache = GraphCache()

    @functools.wraps(fn)
    def outlined(*args: Any, **kwargs: Any) -> Any:
        graph = cache.create_graph(fn, *args, **kwargs)
        tensors = [v for v in _flat(bound_arguments(fn, *args, **kwargs).values())
                   if isinstance(v, popxl.Tensor)]
        outs = ops.call(graph, *tensors)
        return outs[0] if len(outs) == 1 else outs

    return outlined


def _flat(values: Any) -> list[Any]:
    out: list[Any] = []
    for v in values:
        if isinstance(v, list | tuple):
            out.extend(_flat(v))
        elif isinstance(v, dict):
            out.extend(_flat(v.values()))
        else:
            out.append(v)
    return out
