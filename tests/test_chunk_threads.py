"""Conv and pooling kernels run their batch chunks on several threads: same bits, real threads.

``CHUNK_BYTES`` is made tiny here so that small tensors split into many chunks.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from blas_info import blas_thread_counts

import xlgraph as popxl
from xlgraph import ops
from xlgraph.ops import window
from xlgraph.runtime import threads
from xlgraph.transforms import autodiff


def _conv_pool_step(batch: int) -> tuple[popxl.Ir, list, list]:
    """conv -> max_pool -> average_pool, and the gradients of all three."""
    rng = np.random.default_rng(0)
    ir = popxl.Ir()
    with ir.main_graph:
        x_s = popxl.h2d_stream((batch, 2, 9, 9), popxl.float32, "x")
        w = popxl.variable(rng.normal(size=(4, 2, 3, 3)).astype(np.float32), name="w")

        def fwd(x: popxl.Tensor, k: popxl.Tensor) -> popxl.Tensor:
            h = ops.max_pool(ops.conv(x, k), kernel_size=(2, 2), stride=(2, 2))
            return ops.average_pool(h, kernel_size=(2, 2), stride=(1, 1))

        g = ir.create_graph(fwd, x_s.spec, w.spec)
        site = ops.call_with_info(g, ops.host_load(x_s), w)
        bwd = autodiff(g)
        seed = popxl.constant(np.ones(site.outputs[0].shape, np.float32))
        grads = ops.call(bwd.graph, seed, inputs_dict=bwd.inputs_dict(site))
        outs = [site.outputs[0], *grads]
        d2h = [popxl.d2h_stream(t.shape, t.dtype, f"o{i}") for i, t in enumerate(outs)]
        for s, t in zip(d2h, outs):
            ops.host_store(s, t)
    return ir, [x_s], d2h


@pytest.fixture()
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(window, "CHUNK_BYTES", 2048)


@pytest.mark.usefixtures("small_chunks")
def test_two_chunk_threads_give_the_same_bits_as_one() -> None:
    x = np.random.default_rng(1).normal(size=(16, 2, 9, 9)).astype(np.float32)
    results = []
    for n in (1, 2):
        ir, (x_s,), d2h = _conv_pool_step(16)
        session = popxl.Session(ir, chunk_threads=n)
        assert session._threaded
        with session:
            out = session.run({x_s: x})
        results.append([out[s].tobytes() for s in d2h])
    assert results[0] == results[1]
    assert session._chunk_pool.executor is None  # shut down when the Session detached


@pytest.mark.usefixtures("small_chunks")
def test_chunks_run_on_the_pool_threads_only_while_asked() -> None:
    seen: list[str] = []

    def record(sl: slice) -> int:
        seen.append(threading.current_thread().name)
        return sl.start

    with ThreadPoolExecutor(2, thread_name_prefix="xlgraph-chunks") as pool:
        with window.chunks_on(pool):
            starts = window.map_chunks(record, 12, 1024)
            assert starts == sorted(starts) and len(starts) == 6  # results in chunk order
            assert all(name.startswith("xlgraph-chunks") for name in seen)
            seen.clear()
            few = 2 * (window.MIN_THREADED_CHUNKS - 1)  # items: 2 per chunk
            window.map_chunks(record, few, 1024)  # too few chunks to be worth the threads
            assert seen == [threading.current_thread().name] * (few // 2)
    seen.clear()
    window.map_chunks(record, 12, 1024)
    assert seen == [threading.current_thread().name] * 6


@pytest.mark.usefixtures("small_chunks")
def test_two_sessions_with_different_thread_settings_do_not_affect_each_other(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Sessions with 2 and 1 chunk threads run at the same time in two threads: each one's
    kernels use its own setting (the pools belong to the Sessions, not to the process)."""
    ran_on: dict[str, set[str]] = {"two": set(), "one": set()}
    map_chunks = window.map_chunks

    def spy(fn, n, item_bytes):  # noqa: ANN001, ANN202 - a pass-through wrapper
        caller = threading.current_thread().name

        def chunk(sl: slice):  # noqa: ANN202
            ran_on[caller].add(threading.current_thread().name)
            return fn(sl)

        return map_chunks(chunk, n, item_bytes)

    monkeypatch.setattr(window, "map_chunks", spy)
    for module in ("conv", "pool"):
        monkeypatch.setattr(f"xlgraph.ops.{module}.map_chunks", spy, raising=False)
    x = np.random.default_rng(2).normal(size=(16, 2, 9, 9)).astype(np.float32)
    sessions, outs = {}, {}
    for name, n in (("two", 2), ("one", 1)):
        ir, (x_s,), d2h = _conv_pool_step(16)
        sessions[name] = (popxl.Session(ir, chunk_threads=n), x_s, d2h)
    start = threading.Barrier(2)

    def work(name: str) -> None:
        session, x_s, d2h = sessions[name]
        with session:
            start.wait()
            for _ in range(5):
                out = session.run({x_s: x})
        outs[name] = [out[s].tobytes() for s in d2h]

    threads_ = [threading.Thread(target=work, args=(n,), name=n) for n in sessions]
    for t in threads_:
        t.start()
    for t in threads_:
        t.join()
    assert ran_on["one"] == {"one"}  # in turn, on its own thread, while "two" used its pool
    assert any(t.startswith("xlgraph-chunks") for t in ran_on["two"])  # big kernels: its pool
    assert outs["one"] == outs["two"]
    assert all(s._chunk_pool.executor is None for s, _, _ in sessions.values())


def test_auto_uses_every_core_only_for_threaded_kernels_on_a_free_machine(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(threads, "machine_busy", lambda: False)
    assert threads.choose_chunk_threads("auto", True) == 2
    assert threads.choose_chunk_threads("auto", False) == 1
    assert threads.choose_chunk_threads(3, False) == 3
    monkeypatch.setattr(threads, "machine_busy", lambda: True)
    assert threads.choose_chunk_threads("auto", True) == 1


def test_session_looks_at_the_machine_once_for_both_thread_choices(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A busy machine when the chunk threads are chosen and a free one a moment later must not
    give one chunk thread and two BLAS threads (two threads collapse on a busy machine)."""
    answers = iter([True, False])
    monkeypatch.setattr(threads, "machine_busy", lambda: next(answers))
    monkeypatch.setattr(threads, "PARALLEL_MIN_FLOPS", 0.0)  # BLAS would keep its threads
    applied: list[int | None] = []
    monkeypatch.setattr(threads.ThreadLimit, "apply", lambda self, n: applied.append(n))
    with popxl.Session(_conv_pool_step(4)[0]):
        pass
    assert applied == [1]


def test_chunk_threads_give_blas_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    applied: list[int | None] = []
    monkeypatch.setattr(threads.ThreadLimit, "apply", lambda self, n: applied.append(n))
    ir, _, _ = _conv_pool_step(4)
    with popxl.Session(ir, chunk_threads=2, blas_threads=None):
        pass
    with popxl.Session(_conv_pool_step(4)[0], chunk_threads=1, blas_threads=None):
        pass
    assert applied == [1, None]


@pytest.mark.usefixtures("no_compiles_running")  # reads every BLAS library's threads
def test_chunked_session_limits_raised_blas_threads_again_before_a_run() -> None:
    """Raising BLAS threads while a Session runs chunk threads would set two thread pools on
    the same cores; the Session applies its one-thread limit again before the next run, and
    detaching gives BLAS its setting from before the Session attached."""
    threadpoolctl = pytest.importorskip("threadpoolctl")

    def blas_threads() -> set[int]:
        return set(blas_thread_counts())

    ir, (x_s,), _ = _conv_pool_step(4)
    x = np.random.default_rng(1).normal(size=x_s.shape).astype(np.float32)
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        with popxl.Session(ir, chunk_threads=2) as session:
            assert blas_threads() == {1}
            threadpoolctl.threadpool_limits(2, user_api="blas")
            session.run({x_s: x})
            assert blas_threads() == {1}
        assert blas_threads() == {2}
