"""The Session's BLAS thread policy and limits: one thread for small products or a busy
machine, limited while attached (libraries loaded later too), restored on detach."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import xlgraph as popxl
from xlgraph.runtime import threads

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from blas_info import blas_thread_counts  # noqa: E402
from models import build_mlp, mnist_batches  # noqa: E402

# the tests read every BLAS library's threads: no earlier test's compile may load one meanwhile
pytestmark = pytest.mark.usefixtures("no_compiles_running")


def test_blas_thread_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    big = threads.PARALLEL_MIN_FLOPS
    assert threads.choose_threads(None, big) is None and threads.choose_threads(3, 0) == 3
    assert threads.choose_threads("auto", big / 2) == 1  # small matmuls: one thread
    monkeypatch.setattr(threads, "machine_busy", lambda: False)
    assert threads.choose_threads("auto", big) is None  # large and a free core: BLAS decides
    monkeypatch.setattr(threads, "machine_busy", lambda: True)
    assert threads.choose_threads("auto", big) == 1
    assert threads.largest_matrix_flops(build_mlp(8).ir) == 2 * 8 * 32 * 784


def test_session_limits_blas_threads_while_attached() -> None:
    pytest.importorskip("threadpoolctl")

    blas_threads = blas_thread_counts

    before = blas_threads()
    session = popxl.Session(build_mlp(8).ir, blas_threads=1)
    with session:
        assert set(blas_threads()) <= {1}
    assert blas_threads() == before


def test_thread_limit_hold_covers_libraries_set_after_apply() -> None:
    """A BLAS library loaded after the Session attached (numba's, by the kernel thread) comes
    at its default thread count; ``hold`` limits it too, ``restore`` undoes both."""
    threadpoolctl = pytest.importorskip("threadpoolctl")

    def blas_threads() -> set[int]:
        return set(blas_thread_counts())

    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        limit = threads.ThreadLimit()
        limit.apply(1)
        assert blas_threads() == {1}
        threadpoolctl.threadpool_limits(2, user_api="blas")  # as a library loaded since
        limit.mark_stale()
        assert limit.stale and blas_threads() == {2}
        limit.hold()
        assert not limit.stale and blas_threads() == {1}
        limit.restore()
        assert blas_threads() == {2}


def test_thread_limit_hold_compares_with_what_libraries_reported_after_the_limit() -> None:
    """An OpenBLAS built on OpenMP reports OpenMP's thread count, not the limit: ``hold`` must
    not take that for a raised count and limit again before every run."""

    class ReportsOpenMP:
        def get_num_threads(self) -> int:
            return 4

    class Limits:
        restored = 0

        def restore_original_limits(self) -> None:
            Limits.restored += 1

    limit = threads.ThreadLimit()
    limit._limits, limit._threads, limit._libraries = Limits(), 1, [ReportsOpenMP()]
    limit._counts = limit._reported()
    for _ in range(3):
        limit.hold()
    assert Limits.restored == 0


def test_kernel_swap_while_attached_leaves_every_blas_library_limited() -> None:
    pytest.importorskip("threadpoolctl")
    pytest.importorskip("numba", reason="needs the fast extra")
    m = build_mlp(8)
    session = popxl.Session(m.ir, backend="numba", blas_threads=1)
    x, y = mnist_batches(8, 1)[0]
    with session:
        assert session.wait_for_kernels(timeout=600)
        assert session._thread_limit.stale  # the swap asks the next run to re-limit
        session.run({m.images: x, m.labels: y})
        assert set(blas_thread_counts()) == {1}
