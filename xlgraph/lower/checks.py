"""Checks made when a Session lowers an Ir: PopXL's in-place ambiguity.

PopXL schedules ops freely unless ``in_sequence`` or a data dependency orders them, so it refuses
("Inplacing ambiguity detected.") a graph where the result depends on an order nothing fixes:
two in-place ops modifying one tensor, or an op that reads a tensor created after an in-place
op that modifies it (reading the tensor itself rather than the in-place op's output). xlgraph
runs ops in creation order, but refuses the same graphs, so a program that runs here runs on
PopXL too.
"""

from __future__ import annotations

from xlgraph.errors import SchedulingError
from xlgraph.graph import Graph
from xlgraph.ir import Ir
from xlgraph.op import Op
from xlgraph.tensor import Tensor

_AMBIGUITY = "Inplacing ambiguity detected."  # PopXL's sentence


def _root(t: Tensor, cache: dict[Tensor, Tensor]) -> Tensor:
    """The tensor whose buffer ``t`` is, looking through in-place aliases."""
    seen = []
    while t not in cache and t.producer is not None and t.producer.defn.inplace_of is not None:
        seen.append(t)
        t = t.producer.inputs[t.producer.defn.inplace_of]
    root = cache.get(t, t)
    for s in seen:
        cache[s] = root
    return root


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


def _ordered(a: Op, b: Op, bits: dict[Op, int]) -> bool:
    """Whether ``b`` (created after ``a``) surely runs after it."""
    same_block = a.region is not None and a.region == b.region
    return same_block or bool((bits[b] >> a.index) & 1)


def check_inplace_order(ir: Ir) -> None:
    """Raise ``SchedulingError`` ("Inplacing ambiguity detected. ...") when two in-place ops
    modify one tensor, or an op created after an in-place op reads the tensor it modifies, and
    nothing orders them (``in_sequence``, same block, or a data dependency)."""
    for graph in ir.graphs:
        roots: dict[Tensor, Tensor] = {}
        writers: dict[Tensor, list[Op]] = {}
        for op in graph.ops:
            if op.defn.modifies_input:
                writers.setdefault(_root(op.inputs[op.defn.inplace_of], roots), []).append(op)
        if not writers:
            continue
        bits = _ancestors(graph)
        for t, ops in writers.items():
            for a, b in zip(ops, ops[1:]):
                if not _ordered(a, b, bits):
                    raise SchedulingError(
                        f"{_AMBIGUITY} In graph {graph.name!r}, {a.describe()} and "
                        f"{b.describe()} both modify {t.id} in place and nothing orders them; "
                        f"build them inside `with xlgraph.in_sequence():` or make one depend "
                        f"on the other"
                    )
        for op in graph.ops:
            for u in op.inputs:
                for w in writers.get(_root(u, roots), ()):
                    if w.index < op.index and not _ordered(w, op, bits):
                        raise SchedulingError(
                            f"{_AMBIGUITY} In graph {graph.name!r}, {op.describe()} reads "
                            f"{u.id}, which {w.describe()} (created before it) modifies in "
                            f"place, and nothing orders the two; build them inside `with "
                            f"xlgraph.in_sequence():`, or read the in-place op's output"
                        )
