"""The Session's kernel thread (``xlgraph.runtime.kernels``): a Session with the numba backend
starts on numpy's kernels and swaps the compiled loops in between two runs; the results stay
within the backend's tolerance of the numpy backend throughout, runs from other threads never
see a half-swapped step, and the thread stops when asked or when the Session goes away."""

from __future__ import annotations

import gc
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import xlgraph as popxl
import xlgraph.ops as ops
from xlgraph.lower.backends import TOLERANCE
from xlgraph.lower.backends.numba_backend import NumbaBackend
from xlgraph.runtime.kernels import KernelThread

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from models import build_mlp, mnist_batches  # noqa: E402

pytest.importorskip("numba", reason="needs the fast extra")

STEPS = 12


def _losses(session: popxl.Session, m, batches) -> list[float]:
    return [float(session.run({m.images: x, m.labels: y})[m.out]) for x, y in batches]


def test_training_through_the_swap_matches_the_numpy_backend() -> None:
    batches = mnist_batches(8, STEPS)
    ref = build_mlp(8)
    with popxl.Session(ref.ir, backend="numpy") as reference:
        want = _losses(reference, ref, batches)
        want_w = [reference.get_tensor_data(v) for v in ref.variables]
    m = build_mlp(8)
    session = popxl.Session(m.ir, backend="numba")
    assert session.executable.deferred is not None and "j_bias_gelu(" not in session.source
    with session:
        got = _losses(session, m, batches[:STEPS // 2])  # usually before the swap
        assert session.wait_for_kernels(timeout=600)
        assert "j_bias_gelu(" in session.source and session.executable.deferred is None
        got += _losses(session, m, batches[STEPS // 2:])  # compiled loops
    np.testing.assert_allclose(got, want, **TOLERANCE["float32"])
    for v, w in zip(m.variables, want_w):
        np.testing.assert_allclose(session.get_tensor_data(v), w, **TOLERANCE["float32"])


def test_runs_from_another_thread_during_the_swap_stay_consistent() -> None:
    """A thread trains until the compiled loops are in place and a few steps more; the losses
    follow the numpy backend's step for step (a run that mixed two steps' code or buffers, or
    lost an update, would leave them)."""
    batches = mnist_batches(8, 16)
    m = build_mlp(8)
    session = popxl.Session(m.ir, backend="numba")
    got: list[float] = []

    def train() -> None:
        after = 0
        while after < 5:
            x, y = batches[len(got) % len(batches)]
            got.append(float(session.run({m.images: x, m.labels: y})[m.out]))
            after += session.executable.deferred is None
            time.sleep(0.01)  # a few hundred steps while a cached compile runs, not 10^4

    with session:
        worker = threading.Thread(target=train)
        worker.start()
        assert session.wait_for_kernels(timeout=600)
        worker.join()
    ref = build_mlp(8)
    with popxl.Session(ref.ir, backend="numpy") as reference:
        want = _losses(reference, ref, [batches[i % len(batches)] for i in range(len(got))])
    np.testing.assert_allclose(got, want, **TOLERANCE["float32"])


def test_a_program_without_loop_forms_starts_no_thread() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((4, 4), popxl.float32, "x"))
        ops.host_store(popxl.d2h_stream((4, 4), popxl.float32, "y"), ops.matmul(x, x))
    session = popxl.Session(ir, backend="numba")
    assert session._kernels is None and session.wait_for_kernels(timeout=0)


class _Failing(NumbaBackend):
    def kernel(self, *args):  # noqa: ANN002, ANN201
        raise ValueError("no compiler today")


def test_a_failed_compile_keeps_numpys_kernels_and_says_why() -> None:
    m = build_mlp(8)
    session = popxl.Session(m.ir, backend="numpy")
    session.executable.deferred = _Failing()
    kernels = KernelThread(session.executable, session._lock)
    with pytest.raises(RuntimeError, match="compiling the numba kernels failed.*no compiler"):
        kernels.wait(timeout=600)
    assert "j_" not in session.source
    (x, y), = mnist_batches(8, 1)
    with session:
        assert np.isfinite(session.run({m.images: x, m.labels: y})[m.out])


class _Blocked(NumbaBackend):
    """Waits at the first kernel until released, so a test can stop the thread mid-way."""

    def __init__(self) -> None:
        super().__init__()
        self.entered, self.release = threading.Event(), threading.Event()

    def kernel(self, *args):  # noqa: ANN002, ANN201
        self.entered.set()
        self.release.wait(600)
        return super().kernel(*args)


def test_stopping_the_thread_leaves_the_numpy_step_in_place() -> None:
    m = build_mlp(8)
    session = popxl.Session(m.ir, backend="numpy")
    session.executable.deferred = backend = _Blocked()
    kernels = KernelThread(session.executable, session._lock)
    assert backend.entered.wait(600)
    kernels.stop()
    backend.release.set()
    kernels.stop(join=True)
    assert not kernels.wait(timeout=0) and "j_" not in session.source


def test_the_thread_stops_when_the_session_is_collected() -> None:
    m = build_mlp(8)
    session = popxl.Session(m.ir, backend="numba")
    kernels = session._kernels
    del session
    gc.collect()
    kernels.stop(join=True)  # already asked by the Session's finalizer: this only joins
    assert kernels._stop.is_set()
