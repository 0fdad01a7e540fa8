"""Routing a tensor of an enclosing graph into a graph it calls, rewiring the call and repeat
sites already built (popxl-addons' ``route_tensor_into_graph``)."""

from __future__ import annotations

from typing import Any

import xlgraph as popxl
from xlgraph.errors import user_source_line

__all__ = ["is_subgraph", "route_tensor_into_graph"]

_SITES = ("call", "repeat")


def is_subgraph(parent: popxl.Graph, subgraph: popxl.Graph) -> bool:
    """Whether ``subgraph`` is ``parent`` itself or is called by it, directly or through
    other graphs."""
    seen, todo = set(), [parent]
    while todo:
        g = todo.pop()
        if g is subgraph:
            return True
        if id(g) not in seen:
            seen.add(id(g))
            todo.extend(g.called_graphs)
    return False


def route_tensor_into_graph(tensor: popxl.Tensor, graph: popxl.Graph | None = None,
                            modified: Any = False) -> popxl.Tensor:
    """``tensor``'s counterpart in ``graph`` (default: the current graph).

    ``tensor`` itself when it is in ``graph``. Otherwise every call path already built from
    ``tensor``'s graph down to ``graph`` is rewired: each subgraph on the way gains one input
    (named after the tensor; reused when a site already passes the parent tensor, and by every
    later routing of the same tensor) and every ``call`` / ``repeat`` site of it passes the
    parent tensor (for a repeat, as an explicit input). With ``modified`` (True or regions) the
    sites mark that input modified, so in-place writes reach the parent. Sites made later are
    not touched.

    Raises:
        ValueError: ``graph`` is not reached from ``tensor``'s graph through calls.
    """
    graph = graph or popxl.gcg()
    if tensor in graph:
        return tensor
    if not is_subgraph(tensor.graph, graph):
        raise ValueError(f"route_tensor_into_graph: {tensor.id} is not in the graph "
                         f"{graph.name!r} and {tensor.graph.name!r} is not in a known parent "
                         f"graph of it (no call path reaches it) [at {user_source_line()}]")
    return _route(tensor, graph, bool(modified), {})


def _route(tensor: popxl.Tensor, graph: popxl.Graph, modified: bool,
           memo: dict[popxl.Graph, popxl.Tensor]) -> popxl.Tensor:
    if tensor.graph is graph:
        return tensor
    if graph in memo:
        return memo[graph]
    sites = [op for op in graph.call_sites if op.defn.name in _SITES
             and is_subgraph(tensor.graph, op.graph)]
    parents = [_route(tensor, op.graph, modified, memo) for op in sites]
    inner = _existing(graph, sites, parents)
    if inner is None:
        with graph:
            inner = popxl.graph_input(tensor.shape, tensor.dtype, tensor.name.split("/")[-1],
                                      by_ref=modified, meta_shape=tensor.meta_shape)
    index = graph.input_index(inner)
    for op, parent in zip(sites, parents):
        if index == len(op.inputs):
            op.inputs.append(parent)
        if modified:
            op.attrs["modified"].add(index)
    if modified:
        inner.by_ref = True
    memo[graph] = inner
    return inner


def _existing(graph: popxl.Graph, sites: list[Any], parents: list[popxl.Tensor],
              ) -> popxl.Tensor | None:
    """The input of ``graph`` a site already feeds with its parent tensor, if any."""
    for op, parent in zip(sites, parents):
        for i, t in enumerate(op.inputs):
            if t is parent:
                return graph.inputs[i]
    return None
