"""The worker process of ``AsynchronousDataAccessor`` and the ring buffer it fills.

The worker iterates the dataset and writes each batch into the next of ``buffer_size`` slots
of a ring buffer, waiting while that slot still holds a batch the caller has not taken. As in
PopTorch, ``indices_mem`` is a shared array with one flag per slot (1: holds a batch, 0: free)
that both processes see; the batches themselves travel through torch's multiprocessing queue
(shared memory), in order, with the end of an epoch and a failure as plain messages.

After its first batch the worker waits for the caller to start iterating, unless told to load
ahead at once (``early_preload``): the caller then finds exactly one slot filled, or all of
them. SIGINT is ignored in the worker, so a Ctrl-C stops the caller, which then shuts the
worker down; the worker also ends when its parent process is gone.
"""

from __future__ import annotations

import os
import pickle
import queue
import signal
import traceback
from typing import Any

import torch
import torch.multiprocessing as torch_mp

from xlgraph.poptorch.log import logger

__all__ = ["BATCH", "EPOCH_END", "FAILED", "RingBuffer", "Worker", "WorkerDied"]

BATCH, EPOCH_END, FAILED = "batch", "epoch-end", "failed"
_CONTEXT = torch_mp.get_context("fork")
_POLL = 0.05  # seconds between checks that the other side still wants the work


class WorkerDied(Exception):
    """The worker process ended without saying so (killed, crashed)."""

    def __init__(self, pid: int, exitcode: int | None) -> None:
        super().__init__(pid, exitcode)
        self.pid, self.how = pid, _how(exitcode)


class RingBuffer:
    """``size`` slots between the worker and the caller: ``indices_mem[i]`` is 1 while slot
    ``i`` holds a batch not yet taken. Each side counts the slots it has used. An epoch's end
    holds a place too until taken (an empty dataset loaded indefinitely cannot flood the
    queue with ends), without a slot flag."""

    def __init__(self, size: int) -> None:
        self.indices_mem = torch.zeros(size, dtype=torch.uint8).share_memory_()
        self.messages = _CONTEXT.Queue()
        self._free = _CONTEXT.Semaphore(size)
        self._count = 0  # the worker's slots written, or the caller's slots taken

    def write(self, kind: str, batch: Any, running: Any) -> bool:
        """In the worker: put a ``BATCH`` in the next slot, or an ``EPOCH_END``, once there
        is room (False when ``running()`` turns false first)."""
        while not self._free.acquire(timeout=_POLL):
            if not running():
                return False
        if kind == BATCH:
            self.indices_mem[self._count % len(self.indices_mem)] = 1
            self._count += 1
        self.messages.put((kind, batch))
        return True

    def taken(self, kind: str) -> None:
        """In the caller: a ``BATCH`` or ``EPOCH_END`` was handed over; free its place."""
        if kind == BATCH:
            self.indices_mem[self._count % len(self.indices_mem)] = 0
            self._count += 1
        self._free.release()

    def close(self) -> None:
        self.messages.cancel_join_thread()
        self.messages.close()


class Worker:
    """One worker process iterating ``dataset`` into its ``_data_buffers``; ``go`` lets it
    load past its first batch."""

    def __init__(self, dataset: Any, buffer_size: int, load_indefinitely: bool,
                 early_preload: bool) -> None:
        self._data_buffers = RingBuffer(buffer_size)
        self.stop, self.go = _CONTEXT.Event(), _CONTEXT.Event()
        if early_preload:
            self.go.set()
        self.pending: list[tuple[str, Any]] = []  # a message received ahead of the caller
        self.process = _CONTEXT.Process(
            target=_load, name="poptorch-async-loader", daemon=False,
            args=(dataset, self._data_buffers, self.stop, self.go, load_indefinitely,
                  os.getpid()))
        self.process.start()

    def receive(self, miss_sleep_time_in_ms: float) -> tuple[str, Any]:
        """The next message, waiting for it while the process lives (``WorkerDied`` when it
        ended without one)."""
        if self.pending:
            return self.pending.pop(0)
        process, messages = self.process, self._data_buffers.messages
        wait = max(miss_sleep_time_in_ms, 0.1) / 1000
        while True:
            try:
                return messages.get(timeout=wait)
            except queue.Empty:
                if process.is_alive():
                    wait = min(wait * 2, _POLL)
                    continue
                try:  # what it queued before it ended
                    return messages.get(timeout=_POLL)
                except Exception as exc:  # noqa: BLE001 - empty, or its shared memory is gone
                    raise WorkerDied(process.pid, process.exitcode) from exc
            except Exception as exc:  # noqa: BLE001 - a batch whose shared memory died with it
                process.join(timeout=1.0)  # a killed process may not be reaped yet
                if process.is_alive():
                    raise
                raise WorkerDied(process.pid, process.exitcode) from exc


def shutdown(worker: Worker) -> None:
    """Stop a worker: ask, then terminate, then kill; drop its queue."""
    process = worker.process
    worker.stop.set()
    process.join(timeout=1.0)
    if process.is_alive():
        process.terminate()
        process.join(timeout=1.0)
    if process.is_alive():
        process.kill()
        process.join()
    worker._data_buffers.close()


def _how(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


def _picklable(exc: BaseException) -> BaseException:
    try:
        pickle.dumps(exc)
        return exc
    except Exception:  # noqa: BLE001 - anything pickle raises: send its text instead
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def _load(dataset: Any, buffers: RingBuffer, stop: Any, go: Any, load_indefinitely: bool,
          parent: int) -> None:
    """The worker process: epochs of ``dataset`` into ``buffers`` until ``stop``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the caller's to handle
    torch.set_num_threads(1)
    logger.debug("AsynchronousDataAccessor worker process: %d", os.getpid())

    def running() -> bool:
        return not stop.is_set() and os.getppid() == parent

    def started() -> bool:
        while not go.wait(_POLL):
            if not running():
                return False
        return True

    try:
        while running():
            for batch in dataset:
                if not buffers.write(BATCH, batch, running) or not started():
                    return
            if not buffers.write(EPOCH_END, None, running):
                return
            if not load_indefinitely:
                break
    except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
        buffers.messages.put((FAILED, (_picklable(exc), traceback.format_exc())))
    # stay until told to stop: the caller fetches the shared memory of queued tensors from
    # this process when it takes them
    while running():
        stop.wait(0.1)
