"""``GraphCache``: one graph per function (or module) and argument signature."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Hashable
from typing import Any

import xlgraph as popxl
from xlgraph import ops
from xlgraph.addons.cache_key import argument_key, is_module, tensor_key
from xlgraph.core.context import current_hints

__all__ = ["GraphCache", "bound_arguments", "tensor_hash", "argument_hash", "get_function_hash",
           "function"]


def bound_arguments(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """``fn``'s parameters bound to these arguments, defaults applied."""
    target = fn.build if is_module(fn) else fn
    bound = inspect.signature(target).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def tensor_hash(t: popxl.Tensor | popxl.TensorSpec) -> int:
    """Tensors with one spec (shape, dtype, meta shape) hash alike: they make the same graph."""
    return hash(tensor_key(t))


def argument_hash(arg: Any) -> int:
    """A hash of one argument's exact key (``cache_key.argument_key``). Equal hashes do not
    mean equal arguments: ``GraphCache`` compares the keys themselves."""
    return hash(argument_key(arg))


def function_key(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Hashable:
    """The exact cache key of calling ``fn`` (a function or a module) with these arguments, in
    the current placement (``popxl.ipu``, ``popxl.io_tiles``)."""
    bound = bound_arguments(fn, *args, **kwargs)
    return (argument_key(fn), tuple((k, argument_key(v)) for k, v in bound.items()),
            argument_key(current_hints()))


def get_function_hash(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """A hash of ``function_key``; ``GraphCache`` compares the keys themselves."""
    return hash(function_key(fn, *args, **kwargs))


class GraphCache:
    """Create graphs once per function and argument signature.

    ``create_graph(module, ...)`` returns ``(factories, GraphWithNamedArgs)`` as
    ``Module.create_graph`` does; ``create_graph(fn, ...)`` returns a ``popxl.Graph``. A second
    request with the same function (or module) and arguments of the same specs and values
    returns the graph made the first time. Argument keys are exact (``cache_key.argument_key``):
    values and types, never a hash or an id alone. A module is keyed by its class and every
    setting (private ones too), or, as popxl-addons keys it, by the ``__hash__`` (and
    ``__eq__``) its class defines.
    """

    def __init__(self) -> None:
        self._cache: dict[tuple[int, Hashable], Any] = {}

    def create_graph(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A cached graph of ``fn`` for these arguments (see the class)."""
        key = (popxl.gir().id, function_key(fn, *args, **kwargs))
        if key not in self._cache:
            if is_module(fn):
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
