"""``repeat_graph``: a graph that runs another one ``repeat_count`` times."""

from __future__ import annotations

import xlgraph as popxl
from xlgraph import ops
from xlgraph.addons.graph import GraphWithNamedArgs
from xlgraph.addons.utils import suffix_graph_name

__all__ = ["repeat_graph"]


def repeat_graph(graph: GraphWithNamedArgs, repeat_count: int) -> GraphWithNamedArgs:
    """A graph with ``graph``'s inputs (same names, same by-reference flags) that calls it
    ``repeat_count`` times with ``ops.repeat``: output ``i`` of one iteration feeds input ``i``
    of the next, and the last iteration's outputs are returned."""
    inner = graph.graph
    outer = inner.ir.create_empty_graph(suffix_graph_name(inner.name, f"repeat{repeat_count}"))
    with outer:
        ins = [popxl.graph_input(t.shape, t.dtype, t.name, by_ref=getattr(t, "by_ref", False),
                                 meta_shape=t.meta_shape) for t in inner.inputs]
        info = ops.repeat_with_info(inner, repeat_count, *ins)
        for t, parent in zip(inner.inputs, ins):
            if getattr(t, "by_ref", False):
                info.set_parent_input_modified(parent)
        for out in info.outputs:
            popxl.graph_output(out)
    mapping = dict(zip(inner.inputs, ins))
    return GraphWithNamedArgs(outer, graph.args.remap(mapping))
