"""``decompose_sum``: PopXL's pass that splits many-input Sum ops into chains of adds."""

from __future__ import annotations

from xlgraph.graph import Graph

__all__ = ["decompose_sum"]


def decompose_sum(graph: Graph) -> Graph:
    """Return ``graph``, whose gradient sums are already chains of two-input adds.

    In PopART, autodiff sums the gradients reaching one tensor with a single many-input Sum op,
    keeping every partial gradient alive until the last is ready; this pass rewrites it as a
    chain of adds that consumes each partial as soon as it exists. xlgraph's autodiff builds
    that chain directly, in the order the partial gradients are produced, so no Sum op exists
    to decompose.

    Raises:
        TypeError: when ``graph`` is not a Graph.
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"decompose_sum expects a Graph, got {type(graph).__name__}")
    return graph
