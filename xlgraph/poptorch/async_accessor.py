"""``poptorch.AsynchronousDataAccessor``: batches loaded ahead of the caller by a worker process.

As PopTorch's, the accessor iterates ``dataset`` (an iterable of batches, e.g. a ``DataLoader``)
in a separate process that fills a ring buffer of ``buffer_size`` slots (``async_worker.py``);
tensors reach the caller through shared memory. The process is forked, so the dataset needs no
pickling, and it is not a daemon, so a ``DataLoader`` with ``num_workers`` may start its own
workers in it.

Lifetime and iterator state, as PopTorch's:

* building the accessor starts its worker and waits for the first batch: one slot is filled
  before iteration starts, all ``buffer_size`` with ``early_preload``. A worker that fails
  before its first batch prints its traceback and the constructor raises ``poptorch.Error``.
* each ``iter()`` yields one epoch from its start. With ``load_indefinitely`` (the default) the
  worker loads the next epoch as soon as one ends, so the next ``iter()`` starts without a wait;
  an ``iter()`` left early (``break``) makes the next one restart the worker at a new epoch.
* with ``load_indefinitely=False`` the worker ends with the epoch; iterating again starts a new
  one.
* ``terminate()`` stops the worker (collecting the accessor or leaving the interpreter does too);
  iterating afterwards starts a new one.
* a new worker starts from the caller's torch generator, which each start moves on: a shuffling
  ``DataLoader`` gives each restarted epoch a new order, and the first epoch torch's order.
* an exception in the worker later on is raised in the caller with its type; a worker process
  that dies (killed, crashed) raises ``poptorch.Error`` naming its pid and signal instead of
  waiting.
* with ``POPTORCH_LOG_LEVEL=DEBUG`` both processes log their pid (``poptorch::python``).
"""

from __future__ import annotations

import multiprocessing.util
import os
import sys
from collections.abc import Iterator
from typing import Any

import torch

from xlgraph.poptorch.async_worker import BATCH, FAILED, Worker, WorkerDied, shutdown
from xlgraph.poptorch.checks import flag, non_negative, whole
from xlgraph.poptorch.enums import SharingStrategy
from xlgraph.poptorch.log import logger
from xlgraph.poptorch.support import Error

__all__ = ["AsynchronousDataAccessor"]


class AsynchronousDataAccessor:
    """Iterates ``dataset`` in a worker process, ``buffer_size`` batches ahead of the caller.

    The worker starts here and has loaded the first batch when the constructor returns;
    ``early_preload`` lets it fill the whole buffer before iteration starts.
    ``miss_sleep_time_in_ms`` is how long the caller waits for a batch between checks that the
    worker is alive; ``sharing_strategy`` and ``rebatched_size`` are recorded (the worker is
    forked and loads whole batches).
    """

    def __init__(self, dataset: Any, buffer_size: int = 3, miss_sleep_time_in_ms: float = 0.1,
                 load_indefinitely: bool = True, early_preload: bool = False,
                 sharing_strategy: SharingStrategy = SharingStrategy.ForkServer,
                 rebatched_size: int | None = None) -> None:
        self._worker: Worker | None = None  # first: terminate() works when a check fails
        self._finalizer: Any = None
        self._mid_epoch = False
        if getattr(dataset, "_accessor", None) is not None:
            raise Error("The DataLoader already uses an AsynchronousDataAccessor internally. "
                        "Either use the existing one or set mode='poptorch.DataLoaderMode."
                        "Sync' in the DataLoader.")
        setter = "AsynchronousDataAccessor"
        self.dataset = dataset
        self.buffer_size = whole(setter, "buffer_size", buffer_size)
        self.miss_sleep_time_in_ms = non_negative(setter, "miss_sleep_time_in_ms",
                                                  miss_sleep_time_in_ms)
        self.load_indefinitely = flag(setter, "load_indefinitely", load_indefinitely)
        self.early_preload = flag(setter, "early_preload", early_preload)
        self.sharing_strategy = SharingStrategy(sharing_strategy)
        self.rebatched_size = None if rebatched_size is None else \
            whole(setter, "rebatched_size", rebatched_size)
        self._start()
        self._wait_for_first_batch()

    def __len__(self) -> int:
        return len(self.dataset)

    @property
    def worker_pid(self) -> int | None:
        """The worker process's id (None when no worker runs)."""
        return None if self._worker is None else self._worker.process.pid

    def _start(self) -> None:
        if self._worker is not None:
            return
        logger.debug("AsynchronousDataAccessor parent process: %d", os.getpid())
        worker = Worker(self.dataset, self.buffer_size, self.load_indefinitely,
                        self.early_preload)
        # The worker draws its epoch's seeds (a DataLoader's shuffle and worker seeds) from the
        # torch generator it inherited; one draw here moves the caller's generator on, as
        # iterating in this process would, so a restarted worker does not repeat an epoch.
        torch.empty((), dtype=torch.int64).random_()
        self._worker = worker
        # runs when the accessor is collected, and at exit before multiprocessing joins children
        self._finalizer = multiprocessing.util.Finalize(self, shutdown, args=(worker,),
                                                        exitpriority=10)

    def _wait_for_first_batch(self) -> None:
        """Wait until the worker has loaded its first batch (or ended its epoch); a worker
        that fails first is reported as PopTorch does."""
        worker = self._worker
        try:
            message = worker.receive(self.miss_sleep_time_in_ms)
        except WorkerDied as died:
            message = (FAILED, (None, f"AsynchronousDataAccessor: the worker process (pid "
                                      f"{died.pid}) ended ({died.how})\n"))
        if message[0] != FAILED:
            worker.pending.append(message)
            return
        print(message[1][1], file=sys.stderr, end="", flush=True)
        self.terminate()
        raise Error("AsynchronousDataAccessor worker thread failed to start (Check above for "
                    "details)")

    def _died(self, died: WorkerDied) -> Error:
        self.terminate()
        return Error(f"AsynchronousDataAccessor: its worker process (pid {died.pid}) ended "
                     f"unexpectedly ({died.how}) before the epoch ended; iterate again to "
                     f"start a new worker")

    def __iter__(self) -> Iterator[Any]:
        if self._mid_epoch:  # an earlier iteration was left early: restart at a new epoch
            self.terminate()
        self._start()
        worker = self._worker
        worker.go.set()
        self._mid_epoch = True
        while self._worker is worker:  # terminate() ends the iteration
            try:
                kind, value = worker.receive(self.miss_sleep_time_in_ms)
            except WorkerDied as died:
                raise self._died(died) from died
            if kind != FAILED:
                worker._data_buffers.taken(kind)
            if kind == BATCH:
                yield value
                continue
            self._mid_epoch = False
            if kind == FAILED:
                self.terminate()
                raise value[0]
            if not self.load_indefinitely:
                self.terminate()
            return

    def terminate(self) -> None:
        """Stop the worker process (iterating again starts a new one)."""
        self._mid_epoch = False
        if self._finalizer is not None:
            self._finalizer()
        self._worker = self._finalizer = None

    def __del__(self) -> None:
        if getattr(self, "_finalizer", None) is not None:
            self._finalizer()
