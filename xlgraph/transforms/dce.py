"""Dead-op removal on a graph under construction (side effects and outputs stay)."""

from __future__ import annotations

from xlgraph.graph import Graph
from xlgraph.tensor import Tensor


def live_tensors(graph: Graph) -> set[Tensor]:
    """Tensors that reach an output, a side effect or an in-place change of a live tensor."""
    live: set[Tensor] = set(graph.outputs)
    for op in reversed(graph.ops):
        keeps = op.defn.side_effect or any(o in live for o in op.outputs)
        modifies_live = op.defn.inplace_of is not None and op.inputs[op.defn.inplace_of] in live
        if keeps or modifies_live or (op.called_graphs and op.attrs.get("modified")):
            live.update(op.inputs)
            live.update(op.outputs)
    return live


def remove_dead_ops(graph: Graph) -> None:
    """Drop ops whose results are never used, and the tensors only they produced."""
    live = live_tensors(graph)
    graph.remove_ops(op for op in graph.ops
                     if not op.defn.side_effect and not any(o in live for o in op.outputs))
