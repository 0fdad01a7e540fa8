"""The one liveness pass, and the graph-editing API the transforms use."""

from __future__ import annotations

import pytest
from test_differential import SEEDS, build

import xlgraph as popxl
from xlgraph import ops
from xlgraph.lower.liveness import liveness
from xlgraph.lower.program import walk


def _bodies(ex):
    yield ex.plans[ex.program], ex.program.steps
    for fn in ex.program.functions:
        yield ex.plans[fn], fn.steps


def _reads(steps, regions, out, pos_of):
    """Brute force: every (slot, position) read, a region's carried values at its end."""
    for s in steps:
        if s.kind in ("loop", "cond"):
            end = regions[s][1]
            if s.kind == "cond":
                out.append((s.ins[0], pos_of[s]))
            _reads(s.body + s.orelse, regions, out, pos_of)
            for entry in s.carried:
                out.extend((src, end) for src in (entry[1:] if s.kind == "loop" else entry))
        else:
            out.extend((slot, pos_of[s]) for slot in s.ins)
    return out


@pytest.mark.parametrize("seed", SEEDS[:12])
def test_buffer_plan_uses_the_shared_liveness(seed: int) -> None:
    ex = popxl.Session(build(seed)[0]).executable
    for plan, steps in _bodies(ex):
        live = plan.live
        assert list(live.positions) == list(walk(steps))  # depth first, program order
        assert list(live.positions.values()) == list(range(1, len(live.positions) + 1))
        reads = _reads(steps, live.regions, [], live.positions)
        for slot, pos in reads:  # a read is never after the slot's last read
            assert live.last_read[slot] >= pos
        for slot, last in live.last_read.items():  # ... and the last read is a read, or the
            plain = [p for x, p in reads if x == slot]  # end of a region holding one
            ends = [e for _, e in live.regions.values()]
            assert last in plain or last in ends
        for root, last in plan.last_use.items():  # storage roots: the latest of their slots
            slots = [x for x, r in plan.root.items() if r == root and x in live.last_read]
            if slots and last < 1 << 60:
                assert last == max(live.last_read[x] for x in slots)


def test_liveness_of_a_loop_keeps_outer_values_to_its_end() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        stream = popxl.h2d_stream((3,), popxl.float32, "x")
        x = ops.host_load(stream)
        y = x * 2.0
        body = ir.create_graph(lambda a, b: a + b, y.spec, y.spec)
        z = ops.repeat(body, 3, y, y)[0]
        ops.host_store(popxl.d2h_stream((3,), popxl.float32, "z"), z)
    ex = popxl.Session(ir).executable
    live = ex.plans[ex.program].live
    loop = next(s for s in ex.program.walk() if s.kind == "loop")
    start, end = live.regions[loop]
    read_inside = [x for s in walk(loop.body) for x in s.ins if live.created.get(x, -1) < start]
    assert read_inside and all(live.last_read[x] >= end for x in read_inside)
    again = liveness(ex.program.steps, list(ex.program.variable_slots))
    assert again.last_read == live.last_read and again.created == live.created


def test_graph_editing_api() -> None:
    ir = popxl.Ir()
    g = ir.create_graph(lambda a, b: a * 2.0, popxl.TensorSpec((2,), popxl.float32),
                        popxl.TensorSpec((2,), popxl.float32))
    a, b = g.inputs
    with g:
        dead = ops.exp(a)
        kept = ops.sin(a)
    g.remove_ops([dead.producer])
    assert dead not in g.tensors and kept in g.tensors
    assert [op.index for op in g.ops] == list(range(len(g.ops)))
    with pytest.raises(ValueError, match="still used"):
        g.remove_inputs([a])
    g.remove_inputs([b])
    assert g.inputs == (a,) and b not in g.tensors
