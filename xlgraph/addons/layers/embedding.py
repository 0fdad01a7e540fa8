"""``Embedding``: rows of a table picked by index, optionally sharded over replica groups."""

from __future__ import annotations

import math
from functools import partial

import numpy as np

import xlgraph as popxl
from xlgraph import ops
from xlgraph.addons.layers.common import truncnorm
from xlgraph.addons.module import Module

__all__ = ["Embedding"]


class Embedding(Module):
    """A word embedding whose vocabulary is split into ``num_groups`` shards of the
    replica grouping (one shard when None), each padded to a multiple of 16 rows.

    ``weight`` is ``(vocab_shard_size, hidden_size)`` from a normal(0, 0.02) truncated to
    ±2σ, in ``dtype``. Indices must already be offset into this replica's shard
    (``get_offsets``); when sharded, rows for indices outside the shard are zeros.

    Args:
        dtype: the table's dtype.
        vocab_size: the whole vocabulary.
        hidden_size: columns.
        axis: the axis of the table that indices select.
        replica_grouping: one vocabulary shard per group.
    """

    def __init__(self, dtype: popxl.dtype, vocab_size: int, hidden_size: int, axis: int = 0,
                 replica_grouping: popxl.ReplicaGrouping | None = None) -> None:
        super().__init__()
        self.dtype = dtype
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.axis = axis
        self.replica_grouping = replica_grouping
        self.n_shards = replica_grouping.num_groups if replica_grouping is not None else 1
        self.vocab_shard_size = self.get_vocab_shard_size(vocab_size, self.n_shards)

    @staticmethod
    def get_vocab_shard_size(vocab_size: int, n_shards: int) -> int:
        """Rows per shard: ``ceil(vocab_size / n_shards)`` rounded up to a multiple of 16."""
        return 16 * math.ceil(math.ceil(vocab_size / n_shards) / 16)

    @staticmethod
    def get_offsets(vocab_size: int, n_shards: int) -> np.ndarray:
        """The first vocabulary row of every shard."""
        return np.arange(n_shards) * Embedding.get_vocab_shard_size(vocab_size, n_shards)

    def build(self, indices: popxl.Tensor) -> popxl.Tensor:
        """The table rows at ``indices``: shape ``indices.shape + (hidden_size,)``."""
        shape = (self.vocab_shard_size, self.hidden_size)
        if self.axis:
            shape = shape[::-1]
        w = self.add_variable_input("weight", partial(truncnorm, shape), self.dtype,
                                    replica_grouping=self.replica_grouping)
        # a sharded table gathers with zero_OOR: indices of other shards (negative ones too)
        # give zero rows, so an all-reduce over the shards sums the lookups
        return ops.gather(w, indices, axis=self.axis, zero_OOR=self.n_shards > 1)
