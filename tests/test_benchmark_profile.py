"""``benchmarks/profile_step.py --in-step`` times every line of a generated step, those of loop
bodies and of the step's compiled functions included, and the instrumented step computes what
``Session.run`` does."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import profile_step  # noqa: E402

import xlgraph as popxl  # noqa: E402
from xlgraph import ops  # noqa: E402
from xlgraph.lower.flatten import REPEATED_MIN_OPS  # noqa: E402

F32 = popxl.float32


def test_in_step_times_the_lines_of_functions_and_loops() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x_s = popxl.h2d_stream((5,), F32, "x")
        x = ops.host_load(x_s)

        def block(t: popxl.Tensor) -> popxl.Tensor:
            for _ in range(REPEATED_MIN_OPS):
                t = ops.tanh(t) + 0.5
            return t

        g = ir.create_graph(block, x.spec)
        (y,) = ops.call(g, x)
        (z,) = ops.call(g, y * 2.0)  # two sites: a compiled function
        (w,) = ops.repeat(ir.create_graph(lambda t: ops.sin(t) * 0.5, x.spec), 3, z)
        out_s = popxl.d2h_stream((5,), F32, "out")
        ops.host_store(out_s, w)
    session = popxl.Session(ir, backend="numpy")  # no compile wait: the lines are the point
    assert "\ndef f" in session.source and "for " in session.source
    feeds = [{x_s: np.linspace(-1, 1, 5, dtype=np.float32)}]
    with session:
        expected = session.run(feeds[0])[out_s]
        rows, outputs = profile_step.time_in_step(session, feeds, 2, time.perf_counter)
    lines = session.source.splitlines()
    ops_timed = [profile_step.op_of(lines, node) for _, node in rows]
    assert ops_timed.count("tanh") == REPEATED_MIN_OPS  # the function's lines, once each
    assert "sin" in ops_timed  # the loop body's
    assert all(us >= 0 for us, _ in rows)
    np.testing.assert_array_equal(outputs[0], expected)
