"""``poptorch.AsynchronousDataAccessor``: batches loaded ahead of the caller by a worker process.

As PopTorch's, the accessor iterates ``dataset`` (an iterable of batches, e.g. a ``DataLoader``)
in a separate process and keeps up to ``buffer_size`` batches ready; tensors reach the caller
through shared memory (torch's multiprocessing queue). The process is forked, so the dataset
needs no pickling, and it is not a daemon, so a ``DataLoader`` with ``num_workers`` may start its
own workers in it.

Iterator state, as PopTorch's:

* each ``iter()`` yields one epoch from its start. With ``load_indefinitely`` (the default) the
  worker loads the next epoch as soon as one ends, so the next ``iter()`` starts without a wait;
  an ``iter()`` left early (``break``) makes the next one restart the worker at a new epoch.
* with ``load_indefinitely=False`` the worker ends with the epoch; iterating again starts a new
  one.
* ``terminate()`` stops the worker (collecting the accessor or leaving the interpreter does too);
  iterating afterwards starts a new one.
* a new worker starts from the caller's torch generator, which each start moves on: a shuffling
  ``DataLoader`` gives each restarted epoch a new order, and the first epoch torch's order.
* an exception in the worker is raised in the caller with its type; a worker process that dies
  (killed, crashed) raises ``poptorch.Error`` naming its pid and signal instead of waiting.
"""

from __future__ import annotations

import multiprocessing.util
import os
import pickle
import queue
import signal
from collections.abc import Iterator
from typing import Any

import torch
import torch.multiprocessing as torch_mp

from xlgraph.poptorch.checks import flag, non_negative, whole
from xlgraph.poptorch.enums import SharingStrategy
from xlgraph.poptorch.support import Error

__all__ = ["AsynchronousDataAccessor"]

_BATCH, _EPOCH_END, _FAILED = "batch", "epoch-end", "failed"
_CONTEXT = torch_mp.get_context("fork")


class AsynchronousDataAccessor:
    """Iterates ``dataset`` in a worker process, ``buffer_size`` batches ahead of the caller.

    ``miss_sleep_time_in_ms`` is how long the caller waits for a batch between checks that the
    worker is alive; ``early_preload`` starts the worker at construction; ``sharing_strategy``
    and ``rebatched_size`` are recorded (the worker is forked and loads whole batches).
    """

    def __init__(self, dataset: Any, buffer_size: int = 3, miss_sleep_time_in_ms: float = 0.1,
                 load_indefinitely: bool = True, early_preload: bool = False,
                 sharing_strategy: SharingStrategy = SharingStrategy.ForkServer,
                 rebatched_size: int | None = None) -> None:
        self._worker: Any = None  # first: terminate() works even when a check below fails
        self._finalizer: Any = None
        self._mid_epoch = False
        if getattr(dataset, "_accessor", None) is not None:
            raise Error("The DataLoader already uses an AsynchronousDataAccessor internally. "
                        "Either use the DataLoader directly or set its mode to "
                        "DataLoaderMode.Sync.")
        setter = "AsynchronousDataAccessor"
        self.dataset = dataset
        self.buffer_size = whole(setter, "buffer_size", buffer_size)
        self.miss_sleep_time_in_ms = non_negative(setter, "miss_sleep_time_in_ms",
                                                  miss_sleep_time_in_ms)
        self.load_indefinitely = flag(setter, "load_indefinitely", load_indefinitely)
        early_preload = flag(setter, "early_preload", early_preload)
        self.sharing_strategy = SharingStrategy(sharing_strategy)
        self.rebatched_size = None if rebatched_size is None else \
            whole(setter, "rebatched_size", rebatched_size)
        if early_preload:
            self._start()

    def __len__(self) -> int:
        return len(self.dataset)

    @property
    def worker_pid(self) -> int | None:
        """The worker process's id (None when no worker runs)."""
        return None if self._worker is None else self._worker[0].pid

    def _start(self) -> None:
        if self._worker is not None:
            return
        batches = _CONTEXT.Queue(self.buffer_size)
        stop = _CONTEXT.Event()
        process = _CONTEXT.Process(
            target=_load, args=(self.dataset, batches, stop, self.load_indefinitely, os.getpid()),
            name="poptorch-async-loader", daemon=False)
        process.start()
        # The worker draws its epoch's seeds (a DataLoader's shuffle and worker seeds) from the
        # torch generator it inherited; one draw here moves the caller's generator on, as
        # iterating in this process would, so a restarted worker does not repeat an epoch.
        torch.empty((), dtype=torch.int64).random_()
        self._worker = (process, batches, stop)
        # runs when the accessor is collected, and at exit before multiprocessing joins children
        self._finalizer = multiprocessing.util.Finalize(
            self, _shutdown, args=(process, batches, stop), exitpriority=10)

    def _next_message(self) -> tuple[str, Any]:
        process, batches, _ = self._worker
        wait = max(self.miss_sleep_time_in_ms, 0.1) / 1000
        while True:
            try:
                return batches.get(timeout=wait)
            except queue.Empty:
                if process.is_alive():
                    wait = min(wait * 2, 0.05)
                    continue
                try:  # what it queued before it ended
                    return batches.get(timeout=0.05)
                except Exception as exc:  # noqa: BLE001 - empty, or its shared memory is gone
                    raise self._died(process) from exc
            except Exception as exc:  # noqa: BLE001 - a batch whose shared memory died with it
                process.join(timeout=1.0)  # a killed process may not be reaped yet
                if process.is_alive():
                    raise
                raise self._died(process) from exc

    def _died(self, process: Any) -> Error:
        pid, code = process.pid, process.exitcode
        self.terminate()
        return Error(f"AsynchronousDataAccessor: its worker process (pid {pid}) ended "
                     f"unexpectedly ({_how(code)}) before the epoch ended; iterate again to "
                     f"start a new worker")

    def __iter__(self) -> Iterator[Any]:
        if self._mid_epoch:  # an earlier iteration was left early: restart at a new epoch
            self.terminate()
        self._start()
        self._mid_epoch = True
        while True:
            kind, value = self._next_message()
            if kind == _BATCH:
                yield value
                continue
            self._mid_epoch = False
            if kind == _FAILED:
                self.terminate()
                raise value
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


def _how(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


def _shutdown(process: Any, batches: Any, stop: Any) -> None:
    """Stop a worker: ask, then terminate, then kill; drop its queue."""
    stop.set()
    process.join(timeout=1.0)
    if process.is_alive():
        process.terminate()
        process.join(timeout=1.0)
    if process.is_alive():
        process.kill()
        process.join()
    batches.cancel_join_thread()
    batches.close()


def _put(batches: Any, stop: Any, parent: int, message: tuple[str, Any]) -> bool:
    """Queue ``message`` unless told to stop or orphaned first (False then)."""
    while not stop.is_set() and os.getppid() == parent:
        try:
            batches.put(message, timeout=0.05)
            return True
        except queue.Full:
            continue
    return False


def _picklable(exc: BaseException) -> BaseException:
    try:
        pickle.dumps(exc)
        return exc
    except Exception:  # noqa: BLE001 - anything pickle raises: send its text instead
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def _load(dataset: Any, batches: Any, stop: Any, load_indefinitely: bool, parent: int) -> None:
    """The worker process: epochs of ``dataset`` into ``batches`` until ``stop``."""
    torch.set_num_threads(1)
    try:
        while not stop.is_set():
            for batch in dataset:
                if not _put(batches, stop, parent, (_BATCH, batch)):
                    return
            if not _put(batches, stop, parent, (_EPOCH_END, None)) or not load_indefinitely:
                break
    except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
        _put(batches, stop, parent, (_FAILED, _picklable(exc)))
    # stay until told to stop: the caller fetches the shared memory of queued tensors from
    # this process when it takes them
    while not stop.is_set() and os.getppid() == parent:
        stop.wait(0.1)
