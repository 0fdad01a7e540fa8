"""``repeat_graph``: turn a graph's ops into the body of a loop, in place (popxl-addons'
way of running a one-step main program ``n`` times per ``session.run``)."""

from __future__ import annotations

import xlgraph as popxl
from xlgraph import ops
from xlgraph.op import Op

__all__ = ["repeat_graph"]


def repeat_graph(graph: popxl.Graph, repeat_count: int) -> popxl.Graph:
    """Move every op of ``graph`` into a new graph ``repeat_graph`` that ``graph`` then
    repeats ``repeat_count`` times; returns the new loop body (``graph`` itself, unchanged,
    when ``repeat_count <= 1``).

    The ops keep their order and their outputs' names. Each tensor they read that none of
    them produces (variables, constants, graph inputs) becomes one by-reference input of the
    body, connected to that tensor by the single repeat op (no loop-carried outputs; the
    current ``in_sequence`` block applies to it), so in-place updates reach the variables.
    Host and remote transfers now run every iteration: set ``ir.num_host_transfers``.
    """
    if repeat_count <= 1:
        return graph
    moved = list(graph.ops)
    body = graph.ir.create_empty_graph("repeat_graph")
    inner: dict[popxl.Tensor, popxl.Tensor] = {}
    outside: dict[popxl.Tensor, popxl.Tensor] = {}
    with body:
        for op in moved:
            for t in op.inputs:
                if t not in inner:
                    outside[t] = inner[t] = popxl.graph_input(
                        t.shape, t.dtype, t.name.split("/")[-1], by_ref=True,
                        meta_shape=t.meta_shape)
            clone = Op(op.defn, body, [inner[t] for t in op.inputs], dict(op.attrs),
                       op.created_at)
            clone.region, clone.hints = op.region, dict(op.hints)
            clone.outputs = [body.add_tensor(t.spec, t.name, clone) for t in op.outputs]
            inner.update(zip(op.outputs, clone.outputs))
            if "modified" in clone.attrs:
                clone.attrs["modified"] = set(clone.attrs["modified"])
            body.append_op(clone)
            for callee in op.called_graphs:
                callee.call_sites[callee.call_sites.index(op)] = clone
    with graph:
        site = ops.repeat_with_info(body, repeat_count, inputs_dict={
            t: parent for parent, t in outside.items()})
        for parent in outside:
            if not isinstance(parent, popxl.Constant):
                site.set_parent_input_modified(parent)
    graph.remove_ops(moved)
    return body
