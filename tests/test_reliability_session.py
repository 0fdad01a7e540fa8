"""Regression tests: a Session loses nothing under threads, exceptions and interrupts
(issue 9, items 1 to 3)."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops
from xlgraph.errors import StreamInputError

F32 = popxl.float32
BOTH = pytest.mark.parametrize("optimize", [True, False])
WIDTH, RUNS = 256, 150


@pytest.fixture
def fast_thread_switches() -> Iterator[None]:
    """Switch threads as often as possible, so that races show up in few runs."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


def _in_two_threads(work: Callable[[int], None]) -> None:
    """Run ``work(0)`` and ``work(1)`` in two threads; re-raise the first failure."""
    errors: list[BaseException] = []

    def guarded(i: int) -> None:
        try:
            work(i)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the calling thread
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def _counting_ir() -> tuple[popxl.Ir, Any, Any, Any, np.ndarray]:
    """Large enough that numpy releases the GIL in the matmul, where other threads step in."""
    ir = popxl.Ir()
    w_data = np.random.default_rng(0).uniform(-0.1, 0.1, (WIDTH, WIDTH)).astype(np.float32)
    with ir.main_graph, popxl.in_sequence():
        xs = popxl.h2d_stream((16, WIDTH), F32, "x")
        ys = popxl.d2h_stream((16, WIDTH), F32, "y")
        w = popxl.variable(w_data, F32, "w")
        count = popxl.variable(np.zeros((), np.float32), F32, "count")
        x = ops.host_load(xs)
        ops.var_updates.accumulate_(count, popxl.constant(1.0, F32))
        ops.host_store(ys, ops.tanh(ops.gelu(x @ w + 1.0) * 2.0 - 1.0) + x)
    return ir, xs, ys, count, w_data


@BOTH
def test_concurrent_runs_of_one_session_are_serialised(optimize: bool,
                                                       fast_thread_switches: None) -> None:
    ir, xs, ys, count, _ = _counting_ir()
    session = popxl.Session(ir, optimize=optimize)
    rng = np.random.default_rng(1)
    data = rng.standard_normal((2, RUNS, 16, WIDTH)).astype(np.float32)
    with session:
        expected = [[session.run({xs: d})[ys] for d in thread_data] for thread_data in data]
        wrong: list[int] = []

        def worker(i: int) -> None:
            for d, want in zip(data[i], expected[i]):
                if not np.array_equal(session.run({xs: d})[ys], want):
                    wrong.append(i)

        _in_two_threads(worker)
    assert wrong == []
    assert session.get_tensor_data(count) == 2 * 2 * RUNS


def test_two_threads_build_two_irs_at_once() -> None:
    """Each thread has its own current graph (a shared stack reported "another Ir")."""
    both_inside = threading.Barrier(2)
    built: dict[int, str] = {}

    def build(i: int) -> None:
        ir = popxl.Ir()
        with ir.main_graph, popxl.name_scope(f"t{i}"):
            both_inside.wait(timeout=10)
            x = popxl.variable(np.full(3, float(i), np.float32), F32, "x")
            y = ops.relu(x) + float(i)
            both_inside.wait(timeout=10)
            assert popxl.gcg() is ir.main_graph
        built[i] = y.name

    _in_two_threads(build)
    assert built[0].startswith("t0/") and built[1].startswith("t1/")


def _failing_kernel_ir() -> tuple[popxl.Ir, Any, Any]:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        xs = popxl.h2d_stream((), F32, "x")
        count = popxl.variable(np.zeros((), np.float32), F32, "count")
        ops.var_updates.accumulate_(count, ops.host_load(xs))
    return ir, xs, count


@BOTH
def test_an_exception_inside_with_keeps_the_updates(optimize: bool) -> None:
    ir, xs, count = _failing_kernel_ir()
    session = popxl.Session(ir, optimize=optimize)
    with pytest.raises(KeyError), session:
        session.run({xs: np.float32(2.0)})
        raise KeyError("user code fails")
    assert session.get_tensor_data(count) == 2.0
    with pytest.raises(StreamInputError), session:  # a failed run inside the with
        session.run({xs: np.float32(3.0)})
        session.run({})
    assert session.get_tensor_data(count) == 5.0
    with session:  # the next attach writes the kept values back
        session.run({xs: np.float32(1.0)})
    assert session.get_tensor_data(count) == 6.0


def _two_swapped_variables_ir() -> tuple[popxl.Ir, Any, list[Any]]:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        xs = popxl.h2d_stream((4,), F32, "x")
        x = ops.host_load(xs)
        variables = [popxl.variable(np.full(4, float(i), np.float32), F32, f"v{i}")
                     for i in range(3)]
        for v in variables:
            ops.var_updates.accumulate_(v, x)
    return ir, xs, variables


class _InterruptAt:
    """A tracer that raises KeyboardInterrupt at the ``n``-th line run in the Session, the
    executables or the generated step function."""

    FILES = ("session.py", "executable.py", "<xlgraph-step>")

    def __init__(self, n: int) -> None:
        self.left = n
        self.fired = False

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Any:
        if os.path.basename(frame.f_code.co_filename) not in self.FILES:
            return None
        return self.line

    def line(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line" and not self.fired:
            self.left -= 1
            if self.left < 0:
                self.fired = True
                raise KeyboardInterrupt
        return self.line


@BOTH
def test_an_interrupt_anywhere_in_a_run_commits_all_or_nothing(optimize: bool) -> None:
    ir, xs, variables = _two_swapped_variables_ir()
    session = popxl.Session(ir, optimize=optimize)
    if optimize:  # the compiled plan writes these into spare arrays and commits them at the end
        assert len(session.executable.swapped) == 3
    data = np.arange(4, dtype=np.float32)
    n = interrupted = 0
    with session:
        while True:
            before = [session.get_tensor_data(v) for v in variables]
            tracer = _InterruptAt(n)
            sys.settrace(tracer)
            try:
                session.run({xs: data})
            except KeyboardInterrupt:
                interrupted += 1
            finally:
                sys.settrace(None)
            after = [session.get_tensor_data(v) for v in variables]
            changed = [not np.array_equal(a, b) for a, b in zip(after, before)]
            assert changed in ([False] * 3, [True] * 3), (n, changed)
            if changed[0]:
                np.testing.assert_array_equal(after[0], before[0] + data)
            if not tracer.fired:
                break
            n += 1
    assert interrupted == n > 5
