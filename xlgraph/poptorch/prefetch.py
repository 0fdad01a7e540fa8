"""Batches loaded ahead of the caller by a background thread (``poptorch.DataLoader``'s
``prefetch``, see ``dataloader.py``): the caller loads a batch itself whenever none is ready,
so the order, and the sampler's random draws, are the source's."""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["Ahead"]

_DONE = object()
_FAILED = object()


class Ahead:
    """Iterates ``batches``, loading up to ``depth`` batches ahead in a background thread.

    Whoever holds the source's lock loads the next batch and appends it to the ready queue, so
    the order is the source's. The caller takes from the queue; when it is empty, the caller
    loads the batch itself instead of waiting for a thread that may not be scheduled. It wakes
    the thread when half the batches are taken, so the thread works in bursts. The first batch
    is loaded by the caller, in its thread, where torch's samplers draw their seeds. ``close()``
    (also on garbage collection: a ``for`` loop left by ``break`` or an exception) stops and
    joins the thread, which holds only the shared ``_Queue``, never this iterator.
    """

    def __init__(self, batches: Iterator[Any], depth: int = 32) -> None:
        self._queue = _Queue(batches, depth)
        self._worker: threading.Thread | None = None

    def __iter__(self) -> Ahead:
        return self

    def __next__(self) -> Any:
        shared = self._queue
        kind, item = shared.take()
        if kind is None:
            if shared.wants_more():
                self._wake()
            return item
        self.close()
        if kind is _FAILED:
            raise item
        raise StopIteration

    def _wake(self) -> None:
        if self._worker is None:
            self._worker = threading.Thread(target=self._queue.serve, daemon=True,
                                            name="poptorch-dataloader-prefetch")
            self._worker.start()
        self._queue.wanted.set()

    def close(self) -> None:
        """Stop the thread and wait for it (after at most the batches it is loading)."""
        self._queue.stop.set()
        self._queue.wanted.set()
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.join()

    def __del__(self) -> None:
        self.close()


class _Queue:
    """The batches loaded so far, and the source they come from (shared by the two threads)."""

    def __init__(self, batches: Iterator[Any], depth: int) -> None:
        self.batches = batches
        self.ready: collections.deque[tuple[Any, Any]] = collections.deque()
        self.lock = threading.Lock()
        self.wanted = threading.Event()
        self.stop = threading.Event()
        self.depth = depth
        self.finished = False

    def take(self) -> tuple[Any, Any]:
        """The next ``(kind, item)``: loaded ahead, else loaded now by the caller."""
        if not self.ready:
            with self.lock:
                if not self.ready:
                    self.load_one()
        return self.ready.popleft()

    def wants_more(self) -> bool:
        return not self.finished and len(self.ready) <= self.depth // 2

    def load_one(self) -> None:
        """Append the next batch, the end, or the failure (the lock is held)."""
        if self.finished:
            self.ready.append((_DONE, None))
            return
        try:
            self.ready.append((None, next(self.batches)))
        except StopIteration:
            self.finished = True
            self.ready.append((_DONE, None))
        except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread, in order
            self.finished = True
            self.ready.append((_FAILED, exc))

    def serve(self) -> None:
        """The background thread: when woken, load until ``depth`` batches are ready."""
        while self.wanted.wait() and not self.stop.is_set():
            self.wanted.clear()
            while len(self.ready) < self.depth and not self.finished and not self.stop.is_set():
                with self.lock:
                    self.load_one()
            if self.wants_more():
                self.wanted.set()  # taken while loading: go on
