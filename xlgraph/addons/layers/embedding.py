"""``Embedding``: rows of a ``(vocab_size, hidden_size)`` table picked by index."""

from __future__ import annotations

import math
from functools import partial

import numpy as np

import xlgraph as popxl
from xlgraph import ops
from xlgraph.addons.module import Module

__all__ = ["Embedding"]


class Embedding(Module):
    """A word embedding; ``weight`` is drawn from N(0, 0.02).

    Args:
        dtype: the table's dtype.
        vocab_size: rows.
        hidden_size: columns.
        axis: the axis of the table that indices select.
        replica_grouping: replicas sharing the table.
    """

    def __init__(self, dtype: popxl.dtype, vocab_size: int, hidden_size: int, axis: int = 0,
                 replica_grouping: popxl.ReplicaGrouping | None = None) -> None:
        super().__init__()
        self.dtype = dtype
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.axis = axis
        self.replica_grouping = replica_grouping

    @staticmethod
    def get_vocab_shard_size(vocab_size: int, n_shards: int) -> int:
        """Rows per shard when the vocabulary is split ``n_shards`` ways (rounded up)."""
        return math.ceil(vocab_size / n_shards)

    @staticmethod
    def get_offsets(vocab_size: int, n_shards: int) -> np.ndarray:
        """The first row of every shard."""
        return np.arange(n_shards) * Embedding.get_vocab_shard_size(vocab_size, n_shards)

    def build(self, indices: popxl.Tensor) -> popxl.Tensor:
        """The table rows at ``indices``: shape ``indices.shape + (hidden_size,)``."""
        shape = (self.vocab_size, self.hidden_size)
        if self.axis:
            shape = shape[::-1]
        w = self.add_variable_input("weight", partial(np.random.normal, 0, 0.02, shape),
                                    self.dtype, replica_grouping=self.replica_grouping)
        return ops.gather(w, indices, axis=self.axis)
