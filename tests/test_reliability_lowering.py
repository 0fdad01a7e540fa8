"""Regression tests for programs that used to crash the lowering (issue 9, items 6 to 9)."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops
from xlgraph.errors import DeviceMemoryError, ExecutionError, LimitError
from xlgraph.lower.depth import MAX_COMPILED_LOOPS, graph_depth
from xlgraph.transforms import grad_of_call

F32 = popxl.float32
BOTH = pytest.mark.parametrize("optimize", [True, False])


def _run(ir: popxl.Ir, optimize: bool, inputs: dict | None = None) -> dict:
    session = popxl.Session(ir, optimize=optimize)
    with session:
        return session.run(inputs or {})


@BOTH
def test_init_above_the_folding_limit_runs(optimize: bool) -> None:
    """An ``init`` too large to fold stays a kernel without inputs (it was emitted as
    ``k_init(, shape=...)``, a SyntaxError)."""
    ir = popxl.Ir()
    with ir.main_graph:
        zeros = ops.init((600, 600), F32)  # 1.4 MB, above the 1 MiB folding limit
        out = popxl.d2h_stream(zeros.shape, F32, "out")
        ops.host_store(out, zeros + 1.5)
    np.testing.assert_array_equal(_run(ir, optimize)[out], np.full((600, 600), 1.5, np.float32))


@BOTH
def test_repeat_with_an_unread_carried_input(optimize: bool) -> None:
    """The body never reads its carried input; ``w`` comes through ``inputs_dict``."""
    ir = popxl.Ir()
    ir.num_host_transfers = 3
    with ir.main_graph:
        xs = popxl.h2d_stream((4,), F32, "xs")
        ys = popxl.d2h_stream((4,), F32, "ys")
        w = popxl.variable(np.full(4, 2.0, np.float32), F32, "w")

        def body(carried: popxl.Tensor, weight: popxl.Tensor) -> popxl.Tensor:
            y = ops.host_load(xs) * weight
            ops.host_store(ys, y)
            return y

        spec = popxl.TensorSpec((4,), F32)
        g = ir.create_graph(body, spec, spec)
        ops.repeat(g, 3, popxl.constant(np.zeros(4, np.float32)), inputs_dict={g.inputs[1]: w})
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(_run(ir, optimize, {xs: data})[ys], data * 2)


def _nested(levels: int, wrap: str, *, load: bool = False,
            ) -> tuple[popxl.Ir, popxl.DeviceToHostStream]:
    """``levels`` graphs, each calling (``wrap="call"``), repeating once (``"repeat"``) or
    running as the then-arm of a conditional (``"cond"``) the one before; with ``load`` the
    innermost adds a host transfer (stream ``"x"``), so no level can be a function."""
    ir = popxl.Ir()
    spec = popxl.TensorSpec((2,), F32)
    with ir.main_graph:
        x = popxl.h2d_stream((2,), F32, "x")
        g = ir.create_graph(lambda v: v + (ops.host_load(x) if load else 1.0), spec)
        for _ in range(levels):
            if wrap == "call":
                g = ir.create_graph(lambda v, inner=g: ops.call(inner, v)[0] * 1.0, spec)
            elif wrap == "repeat":
                g = ir.create_graph(lambda v, inner=g: ops.repeat(inner, 1, v)[0], spec)
            else:
                double = ir.create_graph(lambda v: v * 2.0, spec)
                g = ir.create_graph(lambda v, inner=g, other=double: ops.conditional(
                    popxl.constant(True), inner, other, [v], [v])[0], spec)
        out = popxl.d2h_stream((2,), F32, "out")
        ops.host_store(out, ops.call(g, popxl.constant(np.zeros(2, np.float32)))[0])
    return ir, out


@BOTH
def test_deeply_nested_calls_lower_and_run(optimize: bool) -> None:
    ir, out = _nested(450, "call")  # a RecursionError from Session() before
    assert graph_depth(ir) == 452
    limit = sys.getrecursionlimit()
    np.testing.assert_array_equal(_run(ir, optimize)[out], [1.0, 1.0])
    assert sys.getrecursionlimit() == limit


@pytest.mark.parametrize("wrap", ["call", "repeat", "cond"])
def test_3000_levels_lower_and_run_in_a_thread_without_touching_the_recursion_limit(
        wrap: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every pass walks with an explicit stack: nesting is bounded by memory (it was capped at
    1000 levels, under a process-wide raised recursion limit). Generated code stays within
    Python's static limits by making functions of bodies nested too deep."""
    def refuse(limit: int) -> None:
        raise AssertionError(f"sys.setrecursionlimit({limit}) called")

    monkeypatch.setattr(sys, "setrecursionlimit", refuse)
    results: list[object] = []

    def build_and_run() -> None:
        ir, out = _nested(3000, wrap)
        results.extend(_run(ir, optimize)[out] for optimize in (True, False))

    worker = threading.Thread(target=build_and_run)
    worker.start()
    worker.join()
    assert len(results) == 2, "the worker failed (see the thread's exception above)"
    for result in results:
        np.testing.assert_array_equal(result, [1.0, 1.0])


def test_3000_nested_calls_differentiate_in_a_thread_without_touching_the_recursion_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """autodiff differentiates called graphs as nested generators: 3000 levels of calls get
    their gradient graphs (it recursed once per level)."""
    def refuse(limit: int) -> None:
        raise AssertionError(f"sys.setrecursionlimit({limit}) called")

    monkeypatch.setattr(sys, "setrecursionlimit", refuse)
    results: list[object] = []
    data = np.array([1.5, -2.0], np.float32)

    def build_and_run() -> None:
        ir = popxl.Ir()
        spec = popxl.TensorSpec((2,), F32)
        with ir.main_graph:
            g = ir.create_graph(lambda v: v * v, spec)
            for _ in range(3000):
                g = ir.create_graph(lambda v, inner=g: ops.call(inner, v)[0] * 1.0, spec)
            x = popxl.variable(data, name="x")
            site = ops.call_with_info(g, x)
            dx = grad_of_call(site, seeds=[popxl.constant(np.ones(2, np.float32))], wrt=[x])
            out = popxl.d2h_stream((2,), F32, "dx")
            ops.host_store(out, dx[x])
        results.append(_run(ir, True)[out])

    worker = threading.Thread(target=build_and_run)
    worker.start()
    worker.join()
    assert len(results) == 1, "the worker failed (see the thread's exception above)"
    np.testing.assert_allclose(results[0], 2 * data)


def test_nested_repeats_beyond_pythons_loop_limit_compile_as_functions() -> None:
    """Python refuses more than 20 nested loops in one function (was a SyntaxError, then a
    LimitError): deeper loop bodies are functions of their own."""
    ir, out = _nested(MAX_COMPILED_LOOPS + 5, "repeat")
    session = popxl.Session(ir)
    assert "\ndef f" in session.source
    with session:
        np.testing.assert_array_equal(session.run({})[out], [1.0, 1.0])


def test_a_large_repeat_body_stays_inline_in_its_loop() -> None:
    """Only bodies nested too deep become functions: a large body called once keeps running
    inline in the loop (a function would return fresh arrays every iteration)."""
    ir = popxl.Ir()
    spec = popxl.TensorSpec((2,), F32)
    with ir.main_graph:
        def body(v: popxl.Tensor) -> popxl.Tensor:
            for _ in range(450):  # above LARGE_MIN_OPS
                v = v * 1.0
            return v

        y, = ops.repeat(ir.create_graph(body, spec), 3, popxl.constant(np.ones(2, np.float32)))
        out = popxl.d2h_stream((2,), F32, "out")
        ops.host_store(out, y)
    session = popxl.Session(ir)
    assert "\ndef f" not in session.source
    with session:
        np.testing.assert_array_equal(session.run({})[out], [1.0, 1.0])


def test_too_many_nested_repeats_that_cannot_be_functions_name_the_way_out() -> None:
    """A body with a host transfer inside must stay inline: beyond Python's loop limit the
    Session says to interpret it."""
    data = np.full(2, 3.0, np.float32)
    ir, out = _nested(MAX_COMPILED_LOOPS + 5, "repeat", load=True)
    with pytest.raises(LimitError, match=r"nests 25 repeat loops.*optimize=False"):
        popxl.Session(ir)
    ir, out = _nested(MAX_COMPILED_LOOPS + 5, "repeat", load=True)
    x = next(iter(ir.h2d_streams))
    np.testing.assert_array_equal(_run(ir, False, {x: data})[out], data)
    ir, out = _nested(MAX_COMPILED_LOOPS, "repeat", load=True)
    np.testing.assert_array_equal(_run(ir, True, {next(iter(ir.h2d_streams)): data})[out], data)


def _huge_intermediate() -> popxl.Ir:
    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((1 << 20, 1), F32, "x"))
        outer = x @ ops.transpose(x)  # 4 TiB of float32
        ops.host_store(popxl.d2h_stream((), F32, "out"), ops.sum(ops.tanh(outer)))
    return ir


def test_huge_intermediate_names_the_op() -> None:
    """A numpy MemoryError from the buffer pool named no op."""
    with pytest.raises(DeviceMemoryError, match=r"4096 GiB .*matmul.*test_reliability_lowering"):
        popxl.Session(_huge_intermediate())


def test_huge_intermediate_in_the_interpreter_names_the_op() -> None:
    ir = _huge_intermediate()
    session = popxl.Session(ir, optimize=False)
    (stream,) = ir.h2d_streams
    with session, pytest.raises(ExecutionError, match="matmul.*MemoryError"):
        session.run({stream: np.ones((1 << 20, 1), np.float32)})
