"""When ``poptorch.AsynchronousDataAccessor`` starts, as PopTorch programs see it: an ``Async``
DataLoader builds its accessor, whose constructor starts the worker and waits for the first
batch (one ring-buffer slot filled, all with ``early_preload``); a worker that fails first
makes the constructor raise ``poptorch.Error`` after the worker's traceback; the pids are
logged at ``DEBUG``; a SIGINT to the worker is swallowed."""

from __future__ import annotations

import gc
import logging
import multiprocessing
import os
import signal
import time

import pytest
from process_helpers import gone

torch = pytest.importorskip("torch")

import xlgraph.poptorch as poptorch  # noqa: E402
from xlgraph.poptorch import log  # noqa: E402


class Increments(torch.utils.data.Dataset):
    """Item ``i`` is a [2, 3] tensor full of ``i``."""

    def __init__(self, n: int = 10) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.full((2, 3), float(i))


@pytest.fixture(autouse=True)
def _same_log_level():
    """Each test leaves the ``poptorch::python`` logger at the level it found (the one
    ``POPTORCH_LOG_LEVEL`` gave at import), whatever level it sets."""
    level = log.logger.level
    yield
    log.logger.setLevel(level)


def _filled(loader: poptorch.DataLoader) -> int:
    return int(loader._accessor._worker._data_buffers.indices_mem.sum())



@pytest.mark.parametrize("early_preload", [False, True])
def test_the_constructor_starts_the_worker_and_preloads(early_preload):
    loader = poptorch.DataLoader(poptorch.Options(), Increments(), batch_size=1,
                                 mode=poptorch.DataLoaderMode.Async,
                                 async_options={"early_preload": early_preload,
                                                "buffer_size": 3})
    try:
        indices = loader._accessor._worker._data_buffers.indices_mem
        assert indices.shape == (3,) and indices[0] == 1  # the first batch is in
        want = 3 if early_preload else 1
        deadline = time.monotonic() + 120  # a loaded machine may take seconds to get there
        while _filled(loader) < want and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # time enough to load more, were it allowed to
        assert indices.tolist() == [1] * want + [0] * (3 - want)
        batches = [b.clone() for b in loader]
        assert [b[0, 0, 0].item() for b in batches] == [float(i) for i in range(10)]
        assert all(b.shape == (1, 2, 3) for b in batches)
    finally:
        loader.terminate()


class Refusing(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> torch.Tensor:
        assert i > 10, f"item {i} may not be read"
        return torch.zeros(2)


def test_a_worker_failing_first_fails_the_constructor_after_its_traceback(capfd):
    before = set(multiprocessing.active_children())
    with pytest.raises(poptorch.Error, match=r"^AsynchronousDataAccessor worker thread failed "
                                             r"to start \(Check above for details\)$"):
        poptorch.DataLoader(poptorch.Options(), Refusing(), mode=poptorch.DataLoaderMode.Async)
    err = capfd.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert "AssertionError: item 0 may not be read" in err
    # the worker was stopped (an earlier test's leftover child may end meanwhile)
    assert set(multiprocessing.active_children()) <= before


class Exiting(torch.utils.data.IterableDataset):
    def __iter__(self):
        os._exit(3)
        yield


def test_a_worker_dying_first_fails_the_constructor(capfd):
    with pytest.raises(poptorch.Error, match="worker thread failed to start"):
        poptorch.AsynchronousDataAccessor(Exiting())
    assert "ended (exit code 3)" in capfd.readouterr().err


def test_debug_logging_names_both_processes(capfd, monkeypatch):
    monkeypatch.setenv("POPTORCH_LOG_LEVEL", "DEBUG")
    log.from_environment()  # what importing poptorch does
    try:
        assert logging.getLogger("poptorch::python").level == logging.DEBUG
        accessor = poptorch.AsynchronousDataAccessor(Increments(2))
        pid = accessor.worker_pid
        accessor.terminate()
    finally:
        poptorch.setLogLevel("WARN")  # for the check below; the fixture restores the level
    err = capfd.readouterr().err
    assert f"AsynchronousDataAccessor parent process: {os.getpid()}" in err
    assert f"AsynchronousDataAccessor worker process: {pid}" in err
    assert "[poptorch:python] [DEBUG]" in err
    accessor = poptorch.AsynchronousDataAccessor(Increments(2))  # WARN again: nothing logged
    accessor.terminate()
    assert "AsynchronousDataAccessor" not in capfd.readouterr().err


def test_set_log_level_takes_poptorchs_names_and_numbers():
    poptorch.setLogLevel(2)
    assert log.logger.level == logging.INFO
    poptorch.setLogLevel("OFF")
    assert log.logger.level > logging.CRITICAL
    with pytest.raises(ValueError, match="unknown level 'LOUD'"):
        poptorch.setLogLevel("LOUD")


def test_a_sigint_to_the_worker_is_swallowed(capfd):
    accessor = poptorch.AsynchronousDataAccessor(
        torch.utils.data.DataLoader(Increments(6), batch_size=2), load_indefinitely=False)
    pid = accessor.worker_pid
    os.kill(pid, signal.SIGINT)
    time.sleep(0.2)
    assert [b[:, 0, 0].tolist() for b in accessor] == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    assert gone(pid)
    assert "KeyboardInterrupt" not in capfd.readouterr().err


def test_dropping_a_loader_stops_its_worker_without_a_collection():
    loader = poptorch.DataLoader(poptorch.Options(), Increments(), batch_size=2,
                                 mode=poptorch.DataLoaderMode.Async)
    pid = loader._accessor.worker_pid
    gc.disable()
    try:
        del loader
        assert gone(pid)
    finally:
        gc.enable()


@pytest.mark.parametrize("shuffle", [False, True])
def test_async_distributed_epochs_are_the_sync_ones(shuffle):
    """Each epoch's block (shifted on odd epochs, reshuffled each epoch) is the same whether
    the worker or the caller loads it."""
    epochs = {}
    for mode in (poptorch.DataLoaderMode.Sync, poptorch.DataLoaderMode.Async):
        opts = poptorch.Options().randomSeed(5)
        opts.Distributed.configureProcessId(1, 2)
        loader = poptorch.DataLoader(opts, list(range(11)), batch_size=2, shuffle=shuffle,
                                     mode=mode)
        epochs[mode] = [[i for b in loader for i in b.tolist()] for _ in range(3)]
        loader.terminate()
    sync = epochs[poptorch.DataLoaderMode.Sync]
    assert epochs[poptorch.DataLoaderMode.Async] == sync
    if not shuffle:  # 4 items each of 11: process 1 reads 4..7, then 7..10 (shifted by 3)
        assert sync == [[4, 5, 6, 7], [7, 8, 9, 10], [4, 5, 6, 7]]


def test_an_empty_dataset_loaded_indefinitely_gives_empty_epochs_without_flooding():
    accessor = poptorch.AsynchronousDataAccessor([], buffer_size=2)
    try:
        time.sleep(0.2)  # time enough for a worker that does not wait to queue many ends
        assert accessor._worker._data_buffers.messages.qsize() <= 2
        assert [list(accessor) for _ in range(3)] == [[], [], []]
    finally:
        accessor.terminate()
