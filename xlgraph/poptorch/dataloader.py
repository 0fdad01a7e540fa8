"""``poptorch.DataLoader`` and ``AsynchronousDataAccessor``: batches that feed one call each.

A dataset with ``collated_batch(indices)`` (``xlgraph.vision``'s ``MNIST``, ``FashionMNIST``,
``CIFAR10``) hands over whole batches, which the loader takes instead of collating items.

In ``DataLoaderMode.Sync`` without worker processes, ``loader.prefetch = True`` prepares the next
batches in a background thread while the caller works on the current one. It pays when the
caller's step releases the GIL (torch, BLAS-heavy steps, I/O) and a core is free; an xlgraph
training step holds the GIL almost throughout, so the thread can only run in the step's place,
and on the 2-core development machine the seed-003 epoch was no faster with it (0.94 to 1.23
times as long in six runs of ``benchmarks/seed003_epoch.py``): hence off by default. The
batches, their order and the sampler's random draws are those of torch's loader: the first
batch is loaded in the caller's thread, where the shuffling draws its seed, and when no batch
is ready the caller loads one itself rather than wait for the thread. The thread ends with the
epoch, or when the caller leaves the loop early (``break``, an exception: the iterator is
collected).

``DataLoaderMode.Async`` and ``AsyncRebatched`` load ahead of the caller in the worker process
of the loader's ``AsynchronousDataAccessor`` (``loader._accessor``, ``async_accessor.py``). As in
PopTorch it is made, and its worker started, by the constructor, which returns once the first
batch is loaded; unlike PopTorch's, the worker ends with each epoch (so a loader kept between
epochs holds no process) and the next ``iter()`` starts a new one. Batches come out in the same
order as synchronous loading; a rebatching loader cuts the partial batches of its workers into
combined batches, as PopTorch does.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Iterator
from typing import Any

import torch

from xlgraph.errors import flag
from xlgraph.poptorch.async_accessor import AsynchronousDataAccessor
from xlgraph.poptorch.enums import DataLoaderMode
from xlgraph.poptorch.options import Options
from xlgraph.poptorch.prefetch import Ahead

__all__ = ["DataLoader", "AsynchronousDataAccessor"]


class DataLoader(torch.utils.data.DataLoader):
    """Batches of ``batch_size x deviceIterations x replicas x gradientAccumulation`` items.

    Args:
        options: the ``poptorch.Options`` of the model the batches feed (frozen here).
        dataset, batch_size, shuffle, num_workers, drop_last: as torch's, with PopTorch's
            defaults (``drop_last=True``); ``batch_size=None`` yields items unbatched.
        persistent_workers: None means ``num_workers > 0``.
        auto_distributed_partitioning: with ``opts.Distributed``, each process reads its own
            share of the dataset.
        mode: ``DataLoaderMode``; ``Async``/``AsyncRebatched`` load ahead in a worker process.
        async_options: keyword arguments of ``AsynchronousDataAccessor`` (``buffer_size``...).
        rebatched_worker_size: with rebatching (``AsyncRebatched``, or ``Async`` without
            ``drop_last``), the batch size torch's loader makes; the accessor's worker cuts
            its batches into combined batches.
        **kwargs: passed to ``torch.utils.data.DataLoader``.

    Attributes:
        prefetch: in ``Sync`` mode without workers, load ahead in a background thread (default
            False; see the module's notes). Not a PopTorch setting.
    """

    prefetch: bool = False

    def __init__(self, options: Options, dataset: Any, batch_size: int | None = 1,
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
        self._combined = None if batch_size is None else (
            batch_size * options.device_iterations * (options.replication_factor // group)
            * options.Training.gradient_accumulation)
        self.mode = DataLoaderMode(mode)
        self._async_options = dict(async_options or {})
        self._accessor: AsynchronousDataAccessor | None = None
        self._drop_last = drop_last
        # PopTorch turns Async with a short last batch into rebatching
        self._rebatched = self._combined is not None and batch_sampler is None and (
            self.mode == DataLoaderMode.AsyncRebatched or (
                self.mode == DataLoaderMode.Async and not drop_last and self._combined > 1))
        if persistent_workers is None:
            persistent_workers = num_workers > 0
        if not drop_last:
            warnings.warn("drop_last=False: a short last batch will not match the compiled "
                          "model's input shape", stacklevel=2)
        processes = options.Distributed.numProcesses
        if auto_distributed_partitioning and processes > 1 and batch_sampler is None and \
                not isinstance(dataset, torch.utils.data.IterableDataset):
            if shuffle:
                assert options.random_seed is not None, \
                    "Shuffling a distributed dataset needs opts.randomSeed(seed)"
            dataset = _SubDataset(dataset, options, self._combined or 1, drop_last,
                                  bool(shuffle))
            shuffle = False  # the blocks are drawn from one permutation for all processes
        common = {"num_workers": num_workers,
                  "persistent_workers": persistent_workers and num_workers > 0, **kwargs}
        if batch_sampler is not None:
            combined = _CombinedBatches(batch_sampler, self._combined // batch_size, drop_last)
            super().__init__(dataset, batch_sampler=combined, **common)
        elif self._rebatched:
            size = rebatched_worker_size or self._combined
            assert size <= self._combined, (
                f"The rebatched_worker_size ({size}) must be <= the combined batch size "
                f"({self._combined})")
            super().__init__(dataset, batch_size=size, shuffle=bool(shuffle), drop_last=False,
                             **common)
        else:
            super().__init__(dataset, batch_size=self._combined, shuffle=bool(shuffle),
                             drop_last=drop_last if self._combined is not None else False,
                             **common)
        if self.mode != DataLoaderMode.Sync:
            self._next_epoch()  # the one the worker starts loading now
            self._accessor = AsynchronousDataAccessor(
                _Batches(self), **{**self._async_options, "load_indefinitely": False})

    def __len__(self) -> int:
        """Batches per epoch: for a rebatching loader ``len(dataset) // combinedBatchSize``
        (one more for a short last batch without ``drop_last``), else torch's."""
        if not self._rebatched:
            return super().__len__()
        whole, rest = divmod(len(self.dataset), self._combined)
        return whole + (1 if rest and not self._drop_last else 0)

    @property
    def combinedBatchSize(self) -> int:  # noqa: N802
        """Items per batch: batch_size x iterations x replicas / group size x accumulation."""
        return self._combined

    @property
    def options(self) -> Options:
        """The (frozen) options the batches are sized for."""
        return self._options

    def __iter__(self) -> Iterator[Any]:
        flag(self.prefetch, "poptorch.DataLoader.prefetch")  # "no" would turn it on
        if self._accessor is None:
            self._next_epoch()
            batches = _collated(self) if _collates_itself(self) else super().__iter__()
            return Ahead(batches) if self.prefetch and not self.num_workers else batches
        if self._accessor.worker_pid is None:  # the last epoch's worker has ended
            self._next_epoch()
        return _epoch(self._accessor)

    def _next_epoch(self) -> None:
        """Move a distributed process's block on to the next epoch (before it is loaded)."""
        if isinstance(self.dataset, _SubDataset):
            self.dataset.next_epoch()

    def terminate(self) -> None:
        """Stop loading ahead (the worker process ends with its epoch's iterator)."""
        if self._accessor is not None:
            self._accessor.terminate()


class _SubDataset(torch.utils.data.Dataset):
    """One process's contiguous block of a map-style dataset, as PopTorch partitions it: with
    ``drop_last``, ``step * (N // (step * n))`` items each (``step`` the combined batch size),
    else ``N // n`` each and one more for the first ``N % n`` processes. With ``shuffle`` the
    block is read from a permutation seeded by ``opts.randomSeed`` and the epoch (the same in
    every process); odd epochs shift the block by the leftover items, so all get used."""

    def __init__(self, dataset: Any, options: Options, step: int, drop_last: bool,
                 shuffle: bool) -> None:
        n, rank, total = (options.Distributed.numProcesses, options.Distributed.processId,
                          len(dataset))
        self.dataset, self.shuffle, self.seed = dataset, shuffle, options.random_seed
        if drop_last:
            self.length = step * (total // (step * n))
            self.start = rank * self.length
        else:
            self.length = total // n + (1 if rank < total % n else 0)
            self.start = rank * (total // n) + min(rank, total % n)
        self.leftover = total - self.length * n if drop_last else 0
        self.epoch = -1
        self.order: Any = None

    def next_epoch(self) -> None:
        self.epoch += 1
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            self.order = torch.randperm(len(self.dataset), generator=generator).tolist()

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> Any:
        if not 0 <= i < self.length:
            raise IndexError(i)
        at = self.start + i + (self.leftover if self.epoch % 2 else 0)
        return self.dataset[self.order[at] if self.order is not None else at]


class _CombinedBatches:
    """A user's ``batch_sampler`` as PopTorch combines it: each ``count`` consecutive batches
    (device iterations x replicas x accumulation) make one batch of indices, so one batch feeds
    one call; a short last group is dropped with ``drop_last``, else yielded short."""

    def __init__(self, batches: Any, count: int, drop_last: bool) -> None:
        self.batches, self.count, self.drop_last = batches, count, drop_last

    def __iter__(self) -> Iterator[list[Any]]:
        group: list[Any] = []
        taken = 0
        for indices in self.batches:
            group.extend(indices)
            taken += 1
            if taken == self.count:
                yield group
                group, taken = [], 0
        if taken and not self.drop_last:
            yield group

    def __len__(self) -> int:
        whole, rest = divmod(len(self.batches), self.count)
        return whole + (1 if rest and not self.drop_last else 0)


def _epoch(accessor: AsynchronousDataAccessor) -> Iterator[Any]:
    """One epoch of ``accessor``'s batches; its worker process (and the worker processes of
    the loader it reads) stop when the epoch ends, fails or is left early (``break``: the
    generator is closed)."""
    try:
        yield from accessor
    finally:
        accessor.terminate()


class _Batches:
    """A DataLoader iterated synchronously (what an asynchronous accessor reads from); a
    rebatching loader's partial batches concatenated into combined batches."""

    def __init__(self, loader: DataLoader) -> None:
        # weak: dropping the loader stops the accessor's worker at once (no reference cycle)
        self.loader = weakref.ref(loader)

    def __iter__(self) -> Iterator[Any]:
        loader = self.loader()
        batches = torch.utils.data.DataLoader.__iter__(loader)
        if not loader._rebatched:
            return batches
        return _rebatched(batches, loader._combined, loader._drop_last)

    def __len__(self) -> int:
        return len(self.loader())


def _rebatched(batches: Iterator[Any], size: int, drop_last: bool) -> Iterator[Any]:
    """Batches of exactly ``size`` items cut from ``batches`` of any sizes (each a tensor or a
    structure of tensors); the last remainder is dropped with ``drop_last``, else short."""
    import torch.utils._pytree as pytree

    pending: list[Any] = []
    count = 0
    spec = None
    for batch in batches:
        leaves, spec = pytree.tree_flatten(batch)
        pending.append(leaves)
        count += leaves[0].shape[0] if leaves else 0
        while count >= size:
            joined = [torch.cat(parts) for parts in zip(*pending)]
            yield pytree.tree_unflatten([t[:size] for t in joined], spec)
            pending = [[t[size:] for t in joined]]
            count -= size
    if count and not drop_last:
        yield pytree.tree_unflatten([torch.cat(parts) for parts in zip(*pending)], spec)


def _collates_itself(loader: DataLoader) -> bool:
    """Whether ``loader``'s dataset makes whole collated batches (``collated_batch(indices)``,
    as ``xlgraph.vision``'s datasets do) that can replace torch's per-batch fetch and default
    collate: single process, map-style, batches from a sampler, no pinned memory."""
    return (loader.num_workers == 0 and loader.batch_sampler is not None
            and loader.collate_fn is torch.utils.data.default_collate and not loader.pin_memory
            and not isinstance(loader.dataset, torch.utils.data.IterableDataset)
            and callable(getattr(loader.dataset, "collated_batch", None)))


def _collated(loader: DataLoader) -> Iterator[Any]:
    """One epoch of ``loader``'s batches, each asked of the dataset whole (``collated_batch``);
    a dataset that answers None is fetched and collated as torch's iterator does. The random
    draws are torch's, in its order: the iterator's base seed, then the sampler's."""
    dataset, collate = loader.dataset, loader.collate_fn
    indices = iter(loader.batch_sampler)
    torch.empty((), dtype=torch.int64).random_(generator=loader.generator)  # the base seed
    for batch_indices in indices:
        batch = dataset.collated_batch(batch_indices)
        if batch is None:
            fetch = getattr(dataset, "__getitems__", None)
            items = fetch(batch_indices) if fetch else [dataset[i] for i in batch_indices]
            batch = collate(items)
        yield batch
