"""``poptorch.DataLoader`` and ``AsynchronousDataAccessor``: batches that feed one call each.

``DataLoaderMode.Async`` and ``AsyncRebatched`` load ahead of the caller in a worker thread
(PopTorch uses a worker process and shared memory; a thread keeps the batches in one address
space and needs no pickling). Batches come out in the same order as synchronous loading.
"""

from __future__ import annotations

import os
import queue
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from xlgraph.poptorch.enums import DataLoaderMode, SharingStrategy
from xlgraph.poptorch.options import Options

__all__ = ["DataLoader", "AsynchronousDataAccessor"]


class DataLoader(torch.utils.data.DataLoader):
    """Batches of ``batch_size x deviceIterations x replicas x gradientAccumulation`` items.

    Args:
        options: the ``poptorch.Options`` of the model the batches feed (frozen here).
        dataset, batch_size, shuffle, num_workers, drop_last: as torch's, with PopTorch's
            defaults (``drop_last=True``). ``num_workers`` is capped at the CPU count.
        persistent_workers: None means ``num_workers > 0``.
        auto_distributed_partitioning: with ``opts.Distributed``, each process reads its own
            share of the dataset.
        mode: ``DataLoaderMode``; ``Async``/``AsyncRebatched`` load ahead in a worker thread.
        async_options: keyword arguments of ``AsynchronousDataAccessor`` (``buffer_size``...).
        rebatched_worker_size: accepted (the worker always loads whole batches).
        **kwargs: passed to ``torch.utils.data.DataLoader``.
    """

    def __init__(self, options: Options, dataset: Any, batch_size: int = 1,
                 shuffle: bool | None = None, num_workers: int = 0, drop_last: bool = True,
                 persistent_workers: bool | None = None,
                 auto_distributed_partitioning: bool = True,
                 mode: DataLoaderMode = DataLoaderMode.Sync, async_options: Any = None,
                 rebatched_worker_size: int | None = None, batch_sampler: Any = None,
                 **kwargs: Any) -> None:
        if not isinstance(options, Options):
            raise TypeError(f"poptorch.DataLoader needs a poptorch.Options, got "
                            f"{type(options).__name__}")
        options.freeze()
        self._options = options
        group = max(options.input_group_size, 1)
        self._combined = (batch_size * options.device_iterations
                          * (options.replication_factor // group)
                          * options.Training.gradient_accumulation)
        self.mode = DataLoaderMode(mode)
        self._async_options = dict(async_options or {})
        workers = min(num_workers, os.cpu_count() or 1)
        if persistent_workers is None:
            persistent_workers = workers > 0
        if not drop_last:
            warnings.warn("drop_last=False: a short last batch will not match the compiled "
                          "model's input shape", stacklevel=2)
        processes = options.Distributed.numProcesses
        if auto_distributed_partitioning and processes > 1 and batch_sampler is None:
            rank = options.Distributed.processId
            dataset = torch.utils.data.Subset(
                dataset, range(rank, len(dataset) - len(dataset) % processes, processes))
        if batch_sampler is not None:
            super().__init__(dataset, batch_sampler=batch_sampler, num_workers=workers,
                             persistent_workers=persistent_workers and workers > 0, **kwargs)
            return
        super().__init__(dataset, batch_size=self._combined, shuffle=bool(shuffle),
                         num_workers=workers, drop_last=drop_last,
                         persistent_workers=persistent_workers and workers > 0, **kwargs)

    @property
    def combinedBatchSize(self) -> int:  # noqa: N802
        """Items per batch: batch_size x iterations x replicas / group size x accumulation."""
        return self._combined

    @property
    def options(self) -> Options:
        """The (frozen) options the batches are sized for."""
        return self._options

    def __iter__(self) -> Iterator[Any]:
        if self.mode == DataLoaderMode.Sync:
            return super().__iter__()
        return iter(AsynchronousDataAccessor(_Batches(self), load_indefinitely=False,
                                             **self._async_options))

    def terminate(self) -> None:
        """Stop loading ahead (the worker thread ends with its iterator)."""


class _Batches:
    """A DataLoader iterated synchronously (what an asynchronous accessor reads from)."""

    def __init__(self, loader: DataLoader) -> None:
        self.loader = loader

    def __iter__(self) -> Iterator[Any]:
        return torch.utils.data.DataLoader.__iter__(self.loader)

    def __len__(self) -> int:
        return len(self.loader)


_DONE = object()


class AsynchronousDataAccessor:
    """Iterates ``dataset`` (an iterable of batches, e.g. a ``DataLoader``) ahead of the caller.

    A worker thread keeps up to ``buffer_size`` batches ready. With ``load_indefinitely`` the
    accessor restarts the dataset after each epoch so loading never stalls; each ``iter()``
    still yields one epoch. ``terminate()`` stops the worker.
    """

    def __init__(self, dataset: Any, buffer_size: int = 3, miss_sleep_time_in_ms: float = 0.1,
                 load_indefinitely: bool = True, early_preload: bool = False,
                 sharing_strategy: SharingStrategy = SharingStrategy.ForkServer,
                 rebatched_size: int | None = None) -> None:
        if buffer_size < 1:
            raise ValueError(f"AsynchronousDataAccessor: buffer_size must be >= 1, got "
                             f"{buffer_size}")
        self.dataset = dataset
        self.buffer_size = buffer_size
        self.miss_sleep_time_in_ms = miss_sleep_time_in_ms
        self.load_indefinitely = load_indefinitely
        self.sharing_strategy = SharingStrategy(sharing_strategy)
        self.rebatched_size = rebatched_size
        self._queue: queue.Queue[Any] = queue.Queue(buffer_size)
        self._stop = threading.Event()
        self._worker: threading.Thread | None = None
        if early_preload:
            self._start()

    def __len__(self) -> int:
        return len(self.dataset)

    def _start(self) -> None:
        if self._worker is None:
            self._worker = threading.Thread(target=self._load, daemon=True,
                                            name="poptorch-async-loader")
            self._worker.start()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _load(self) -> None:
        try:
            while not self._stop.is_set():
                for batch in self.dataset:
                    if not self._put(batch):
                        return
                if not self._put(_DONE) or not self.load_indefinitely:
                    return
        except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer
            self._put(exc)

    def __iter__(self) -> Iterator[Any]:
        self._start()
        while True:
            try:
                item = self._queue.get(timeout=self.miss_sleep_time_in_ms / 1000)
            except queue.Empty:
                if self._worker is None or not self._worker.is_alive():
                    if self._queue.empty():
                        return
                time.sleep(0)
                continue
            if item is _DONE:
                if not self.load_indefinitely:
                    self._worker = None
                return
            if isinstance(item, BaseException):
                self._worker = None
                raise item
            yield item

    def terminate(self) -> None:
        """Stop the worker thread."""
        self._stop.set()
        if self._worker is not None:
            self._worker.join(timeout=5)
            self._worker = None

    def __del__(self) -> None:
        self._stop.set()
