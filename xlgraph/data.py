"""A small numpy batch loader, with optional grouping of batches per host transfer."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


class DataLoader:
    """Iterate tuples of batches (one per array) over arrays that share their first dimension.

    Each ``iter()`` is one epoch. With ``shuffle`` the rows are permuted by a generator seeded
    once with ``seed``, so every epoch has a new order and the sequence of epochs is the same for
    the same seed. With ``num_host_transfers = n > 1`` every yielded array has shape
    ``(n, batch_size, ...)``: ``n`` consecutive batches, as a session with
    ``ir.num_host_transfers = n`` expects; incomplete groups are dropped. Unshuffled batches
    are views of the input arrays.
    """

    def __init__(
        self,
        *arrays: np.ndarray,
        batch_size: int,
        shuffle: bool = False,
        seed: int | None = None,
        drop_last: bool = False,
        num_host_transfers: int = 1,
    ) -> None:
        """Create the loader.

        Args:
            *arrays: One or more arrays with the same length along the first dimension.
            batch_size: Rows per batch.
            shuffle: Permute the rows anew for every epoch.
            seed: Seed of the shuffling generator.
            drop_last: Drop the last batch when it has fewer than ``batch_size`` rows.
            num_host_transfers: Batches per yielded group.

        Raises:
            ValueError: On no arrays, arrays of different lengths, non-positive sizes, or
                fewer rows than one batch group needs.
        """
        if not arrays:
            raise ValueError("DataLoader needs at least one array")
        if batch_size < 1 or num_host_transfers < 1:
            raise ValueError(
                f"batch_size ({batch_size}) and num_host_transfers ({num_host_transfers}) "
                "must be positive"
            )
        self.arrays = tuple(np.asarray(a) for a in arrays)
        lengths = [a.shape[0] if a.ndim else None for a in self.arrays]
        if None in lengths or len(set(lengths)) != 1:
            raise ValueError(f"arrays must share their first dimension, got lengths {lengths}")
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.num_host_transfers = num_host_transfers
        self._rng = np.random.default_rng(seed)
        if len(self) == 0:
            need = batch_size * num_host_transfers
            raise ValueError(
                f"DataLoader: {lengths[0]} rows make no complete group of {need} rows "
                f"(batch_size={batch_size} x num_host_transfers={num_host_transfers}), so an "
                f"epoch would be empty; use a smaller batch_size or num_host_transfers"
            )

    def __len__(self) -> int:
        """Number of items one epoch yields."""
        rows = len(self.arrays[0])
        if self.num_host_transfers > 1:
            return rows // (self.batch_size * self.num_host_transfers)
        return rows // self.batch_size if self.drop_last else -(-rows // self.batch_size)

    def __iter__(self) -> Iterator[tuple[np.ndarray, ...]]:
        """Yield one epoch of batches (or batch groups)."""
        order = self._rng.permutation(len(self.arrays[0])) if self.shuffle else None
        step = self.batch_size * self.num_host_transfers
        arrays = self.arrays
        group = (self.num_host_transfers, self.batch_size)
        for start in range(0, len(self) * step, step):
            if order is None:
                batch = [a[start : start + step] for a in arrays]
            else:  # ndarray.take: the cheapest row gather, and it runs once per batch
                rows = order[start : start + step]
                batch = [a.take(rows, axis=0) for a in arrays]
            if self.num_host_transfers > 1:
                batch = [b.reshape(group + b.shape[1:]) for b in batch]
            yield tuple(batch)
