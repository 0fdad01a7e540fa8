"""``ops.print_tensor``: run-time printing to stderr, formatting, dead-code survival, gradients."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph
from xlgraph import ops
from xlgraph.ops.debug import format_tensor
from xlgraph.transforms import autodiff


def _session(ir: xlgraph.Ir, optimize: bool = True) -> xlgraph.Session:
    return xlgraph.Session(ir, optimize=optimize)


@pytest.mark.parametrize("optimize", [True, False])
def test_prints_each_run_to_stderr_with_the_default_title(capfd, optimize: bool) -> None:
    ir = xlgraph.Ir()
    with ir.main_graph:
        s = xlgraph.h2d_stream((3,), xlgraph.float32, "x")
        x = ops.host_load(s, "acts")
        y = ops.print_tensor(x)
        out = xlgraph.d2h_stream((3,), xlgraph.float32, "y")
        ops.host_store(out, y * 2.0)
    session = _session(ir, optimize)
    capfd.readouterr()
    with session:
        first = session.run({s: np.array([1.0, 2.5, -3.0], np.float32)})[out].copy()
        session.run({s: np.array([0.0, 0.0, 4.0], np.float32)})
    captured = capfd.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == ["print_acts: [ 1.   2.5 -3. ]", "print_acts: [0. 0. 4.]"]
    np.testing.assert_array_equal(first, [2.0, 5.0, -6.0])


def test_an_unused_print_is_kept_and_print_self_false_prints_nothing(capfd) -> None:
    ir = xlgraph.Ir()
    with ir.main_graph:
        v = xlgraph.variable(np.arange(4, dtype=np.int32), name="v")
        ops.print_tensor(v, "kept")
        ops.print_tensor(v, "silent", print_self=False)
    session = _session(ir)
    capfd.readouterr()
    with session:
        session.run()
    assert capfd.readouterr().err == "kept: [0 1 2 3]\n"


def test_prints_once_per_repeat_iteration_and_only_in_the_branch_that_runs(capfd) -> None:
    ir = xlgraph.Ir()
    with ir.main_graph:
        spec = xlgraph.TensorSpec((), xlgraph.float32)
        body = ir.create_graph(lambda t: ops.print_tensor(t + 1.0, "step"), spec)
        (n,) = ops.repeat(body, 3, xlgraph.constant(np.float32(0.0)))
        loud = ir.create_graph(lambda t: ops.print_tensor(t, "then"), n)
        quiet = ir.create_graph(lambda t: ops.print_tensor(t, "else"), n)
        ops.conditional(ops.greater(n, xlgraph.constant(np.float32(2.0))), loud, quiet, [n], [n])
    session = _session(ir)
    capfd.readouterr()
    with session:
        session.run()
    assert capfd.readouterr().err.splitlines() == ["step: 1.", "step: 2.", "step: 3.", "then: 3."]


def test_print_gradient_prints_the_gradient_with_a_suffixed_title(capfd) -> None:
    ir = xlgraph.Ir()
    with ir.main_graph:
        graph = ir.create_graph(
            lambda x: ops.print_tensor(x * 3.0, "h", print_gradient=True) * 2.0,
            xlgraph.TensorSpec((2,), xlgraph.float32))
        info = autodiff(graph)
        site = ops.call_with_info(graph, xlgraph.constant(np.array([1.0, -1.0], np.float32)))
        (dx,) = ops.call(info.graph, xlgraph.constant(np.ones(2, np.float32)),
                         inputs_dict=info.inputs_dict(site))
        out = xlgraph.d2h_stream((2,), xlgraph.float32, "dx")
        ops.host_store(out, dx)
    session = _session(ir)
    capfd.readouterr()
    with session:
        got = session.run()[out]
    np.testing.assert_array_equal(got, [6.0, 6.0])
    assert capfd.readouterr().err.splitlines() == ["h: [ 3. -3.]", "h_gradient: [2. 2.]"]


def test_gradient_passes_through_without_printing_by_default(capfd) -> None:
    ir = xlgraph.Ir()
    with ir.main_graph:
        graph = ir.create_graph(lambda x: ops.print_tensor(x, "fwd_only") * x,
                                xlgraph.TensorSpec((2,), xlgraph.float32))
        info = autodiff(graph)
        site = ops.call_with_info(graph, xlgraph.constant(np.array([2.0, 5.0], np.float32)))
        (dx,) = ops.call(info.graph, xlgraph.constant(np.ones(2, np.float32)),
                         inputs_dict=info.inputs_dict(site))
        out = xlgraph.d2h_stream((2,), xlgraph.float32, "dx")
        ops.host_store(out, dx)
    session = _session(ir)
    capfd.readouterr()
    with session:
        got = session.run()[out]
    np.testing.assert_array_equal(got, [4.0, 10.0])
    assert capfd.readouterr().err == "fwd_only: [2. 5.]\n"


def test_format_options() -> None:
    x = np.arange(20, dtype=np.float32) / 4
    summary = format_tensor(x, summarise_threshold=10, edge_items=2)
    assert summary.startswith("[0.   0.25") and "..." in summary and summary.endswith("4.75]")
    assert format_tensor(np.array([1.5, 2.0]), digits=3, float_format="fixed") == "[1.500 2.000]"
    assert format_tensor(np.array([1500.0]), digits=2, float_format="scientific") == "[1.50e+03]"
    assert format_tensor(np.array([0.1, 2.0]), float_format="none") == "[0.1 2.0]"
    assert format_tensor(np.array([[1, 2], [3, 4]]), separator=", ", open_bracket="{",
                         close_bracket="}") == "{{1, 2},\n {3, 4}}"
    wrapped = format_tensor(np.arange(30), max_line_width=20)
    assert max(len(line) for line in wrapped.splitlines()) <= 20


def test_bad_float_format_is_refused_at_build_time() -> None:
    ir = xlgraph.Ir()
    with ir.main_graph:
        v = xlgraph.variable(np.zeros(2, np.float32))
        with pytest.raises(ValueError, match="float_format"):
            ops.print_tensor(v, float_format="hex")
