"""``set_available_memory_proportion_by_ipu``: one available-memory proportion per IPU for
every op that takes one.

The proportion is a PopXL planning hint: the ipu_model records it on ``op.hints``; values are
unaffected. The ops that take it are those whose ``xlgraph.ops`` builder has an
``available_memory_proportion(s)`` parameter (matmul, convolutions, gather, ...).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence

import xlgraph as popxl
from xlgraph import ops

__all__ = ["set_available_memory_proportion_by_ipu",
           "set_graph_available_memory_proportion_by_ipu"]

_PARAMS = ("available_memory_proportion", "available_memory_proportions")


@functools.cache
def accepting_ops() -> frozenset[str]:
    """Names of the ops whose builders take an available-memory proportion."""
    names = set()
    for name in dir(ops):
        fn = getattr(ops, name)
        if callable(fn) and not inspect.isclass(fn):
            try:
                params = inspect.signature(fn).parameters
            except (TypeError, ValueError):
                continue
            if any(p in params for p in _PARAMS):
                names.add(name)
    return frozenset(names)


def _set(graph: popxl.Graph, proportions: Sequence[float], seen: set[int]) -> None:
    if id(graph) in seen:
        return
    seen.add(id(graph))
    for op in graph.ops:
        if op.defn.name in accepting_ops():
            ipu = op.hints.get("ipu", 0)
            op.hints["available_memory_proportion"] = (
                proportions[ipu] if ipu < len(proportions) else proportions[0])
        for called in op.called_graphs:
            _set(called, proportions, seen)


def set_graph_available_memory_proportion_by_ipu(graph: popxl.Graph,
                                                 proportions: Sequence[float]) -> None:
    """Give every op of ``graph`` (and of the graphs it calls) that takes an available-memory
    proportion ``proportions[its IPU]`` (``proportions[0]`` when the list is shorter),
    replacing a value set on the op."""
    _set(graph, list(proportions), set())


def set_available_memory_proportion_by_ipu(ir: popxl.Ir, proportions: Sequence[float]) -> None:
    """``set_graph_available_memory_proportion_by_ipu`` on every graph of ``ir``."""
    seen: set[int] = set()
    for graph in ir.graphs:
        _set(graph, list(proportions), seen)
