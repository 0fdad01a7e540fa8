"""Routing a tensor of an enclosing graph into the graph being built."""

from __future__ import annotations

import xlgraph as popxl

__all__ = ["is_subgraph", "route_tensor_into_graph"]


def is_subgraph(parent: popxl.Graph, subgraph: popxl.Graph) -> bool:
    """Whether ``parent`` calls ``subgraph``, directly or through other graphs."""
    seen, todo = set(), list(parent.called_graphs)
    while todo:
        g = todo.pop()
        if g is subgraph:
            return True
        if id(g) not in seen:
            seen.add(id(g))
            todo.extend(g.called_graphs)
    return False


def route_tensor_into_graph(tensor: popxl.Tensor, graph: popxl.Graph | None = None,
                            modified: bool = False) -> popxl.Tensor:
    """``tensor`` when it is in ``graph`` (default: the current graph), else a new graph input
    of its spec (by reference when ``modified``): the caller connects it at the call site."""
    graph = graph or popxl.gcg()
    if tensor in graph:
        return tensor
    with graph:
        return popxl.graph_input(tensor.shape, tensor.dtype, tensor.name, by_ref=modified,
                                 meta_shape=tensor.meta_shape)
