"""Call cycles and foreign graphs (issue 22, item 2 and a smaller item).

A graph that called itself, directly or through other graphs, conditionals or repeats, used to
hang ``Session()`` (``graph_depth`` walked forever while memory grew). The call site now
refuses it, naming the cycle's graphs and the user lines of its call sites; ``Session()``
refuses a cycle that was built some other way. A call of a graph of another Ir is refused.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops
from xlgraph.errors import CallCycleError, GraphMismatchError

F32 = popxl.float32
HERE = os.path.basename(__file__)


def _graphs(ir: popxl.Ir) -> tuple[popxl.Graph, popxl.Graph]:
    """``g`` (adds one) and ``h`` (calls ``g``), each with one f32[2] input and output."""
    g = ir.create_empty_graph("g", unique_suffix=False)
    h = ir.create_empty_graph("h", unique_suffix=False)
    with g:
        x = popxl.graph_input((2,), F32, "x")
        popxl.graph_output(x + 1.0)
    with h:
        x = popxl.graph_input((2,), F32, "x")
        (y,) = ops.call(g, x)
        popxl.graph_output(y)
    return g, h


def _line(marker: str) -> int:
    with open(__file__) as f:
        return next(i for i, text in enumerate(f, 1) if marker in text and "_line(" not in text)


SELF_CALLS = {
    "call": lambda g, x: ops.call(g, x),
    "repeat": lambda g, x: ops.repeat(g, 2, x),
    "conditional": lambda g, x: ops.conditional(True, g, g, [x], [x]),
}


@pytest.mark.parametrize("kind", list(SELF_CALLS))
def test_a_graph_calling_itself_is_refused_at_the_call(kind: str) -> None:
    ir = popxl.Ir()
    g, _ = _graphs(ir)
    before = len(g.ops)
    with g, pytest.raises(CallCycleError) as info:
        SELF_CALLS[kind](g, g.inputs[0])
    message = str(info.value)
    assert f"{kind} of 'g' in graph 'g' would make a call cycle" in message
    assert f"[at {HERE}:" in message
    assert len(g.ops) == before  # nothing was added


def test_a_cycle_through_another_graph_names_every_call_site() -> None:
    ir = popxl.Ir()
    g, h = _graphs(ir)
    with g, pytest.raises(CallCycleError) as info:
        ops.repeat(h, 3, g.inputs[0])  # closes the cycle
    message = str(info.value)
    assert "'g' calls 'h' here; 'h' calls 'g' (call at " in message
    assert f"[at {HERE}:{_line('# closes the cycle')}]" in message


def test_a_cycle_through_a_conditional_branch_is_refused() -> None:
    ir = popxl.Ir()
    g, h = _graphs(ir)
    k = ir.create_empty_graph("k", unique_suffix=False)
    with k:
        x = popxl.graph_input((2,), F32, "x")
        (y,) = ops.conditional(True, h, g, [x], [x])
        popxl.graph_output(y)
    with g, pytest.raises(CallCycleError, match="'g' calls 'k' here; 'k' calls 'g' "
                                                r"\(conditional at test_reliability_calls.py:"):
        ops.call(k, g.inputs[0])


def test_the_deep_acyclic_diamond_is_accepted() -> None:
    """Graphs called from several places (not a cycle) still work."""
    ir = popxl.Ir()
    g, h = _graphs(ir)
    with ir.main_graph:
        x = popxl.constant(np.zeros(2, np.float32))
        (a,) = ops.call(h, x)
        (b,) = ops.call(g, a)
        (c,) = ops.repeat(h, 2, b)
        out = popxl.d2h_stream((2,), F32, "out")
        ops.host_store(out, c)
    with popxl.Session(ir) as session:
        np.testing.assert_array_equal(session.run({})[out], np.full(2, 4.0, np.float32))


CYCLE_AT_SESSION = """
import xlgraph as popxl
from xlgraph import ops
import sys
call_module = sys.modules["xlgraph.ops.call"]
from xlgraph.errors import CallCycleError
call_module.check_callees = lambda *a: None  # build the cycle past the call-site check
ir = popxl.Ir()
g = ir.create_empty_graph("g", unique_suffix=False)
with g:
    x = popxl.graph_input((2,), popxl.float32, "x")
    popxl.graph_output(x + 1.0)
    ops.call(g, x)
with ir.main_graph:
    ops.call(g, popxl.constant([1.0, 2.0]))
try:
    popxl.Session(ir)
except CallCycleError as exc:
    print(exc)
"""


def test_session_refuses_a_cycle_built_past_the_call_check() -> None:
    """Before the fix ``Session()`` never returned (run in a subprocess with a timeout)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", CYCLE_AT_SESSION], capture_output=True,
                          text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "graphs call each other in a cycle: 'g' calls 'g' (call at <string>:13)" in done.stdout


def test_a_graph_of_another_ir_is_refused() -> None:
    g, _ = _graphs(popxl.Ir())
    other = popxl.Ir()
    with other.main_graph, pytest.raises(GraphMismatchError, match="belongs to another Ir"):
        ops.call(g, popxl.constant(np.zeros(2, np.float32)))
    assert not other.main_graph.ops
