"""Checks made when a Session lowers an Ir: unordered in-place ops on one tensor."""

from __future__ import annotations

from xlgraph.errors import SchedulingError
from xlgraph.graph import Graph
from xlgraph.ir import Ir
from xlgraph.op import Op
from xlgraph.tensor import Tensor


def _written_tensor(op: Op) -> Tensor:
    """The tensor whose buffer ``op`` writes, looking through in-place aliases."""
    t = op.inputs[op.defn.inplace_of]
    while t.producer is not None and t.producer.defn.inplace_of is not None:
        t = t.producer.inputs[t.producer.defn.inplace_of]
    return t


def _ancestors(graph: Graph) -> dict[Op, int]:
    """Bitset of the ops each op depends on through data."""
    bits: dict[Op, int] = {}
    for op in graph.ops:
        acc = 0
        for t in op.inputs:
            if t.producer is not None and t.producer in bits:
                acc |= bits[t.producer] | (1 << t.producer.index)
        bits[op] = acc
    return bits


def check_inplace_order(ir: Ir) -> None:
    """Raise when two in-place ops modify one tensor and nothing orders them.

    Ops are ordered by ``in_sequence`` (same block) or by a data dependency between them.
    """
    for graph in ir.graphs:
        writers: dict[Tensor, list[Op]] = {}
        for op in graph.ops:
            if op.defn.modifies_input:
                writers.setdefault(_written_tensor(op), []).append(op)
        ambiguous = {t: ops for t, ops in writers.items() if len(ops) > 1}
        if not ambiguous:
            continue
        bits = _ancestors(graph)
        for t, ops in ambiguous.items():
            for a, b in zip(ops, ops[1:]):
                same_block = a.region is not None and a.region == b.region
                if not same_block and not (bits[b] >> a.index) & 1:
                    raise SchedulingError(
                        f"in graph {graph.name!r}, {a.describe()} and {b.describe()} both modify "
                        f"{t.id} in place and nothing orders them; build them inside "
                        f"`with xlgraph.in_sequence():` or make one depend on the other"
                    )
