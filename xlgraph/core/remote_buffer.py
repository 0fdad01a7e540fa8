"""Remote buffers: entries of off-chip memory that an Ir's programs load from and store to
(``ops.remote_load`` / ``ops.remote_store``); the builders are in ``xlgraph.remote``."""

from __future__ import annotations

import itertools
import math
import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from xlgraph.dtypes import dtype

if TYPE_CHECKING:
    from xlgraph.core.tensor import Tensor
    from xlgraph.replica_grouping import ReplicaGrouping

__all__ = ["RemoteBuffer", "RemoteLocation"]

_buffer_ids = itertools.count(1)


class RemoteBuffer:
    """``entries`` slots of ``tensor_shape``/``tensor_dtype`` in off-chip memory, per replica.

    For a replica-sharded buffer, ``tensor_shape`` is one shard, ``meta_shape`` the whole tensor
    and ``shard_over`` the number of replicas that split it: the members of one group of
    ``shard_grouping``, in order.
    """

    def __init__(self, tensor_shape: tuple[int, ...], tensor_dtype: dtype, entries: int, *,
                 meta_shape: tuple[int, ...] = (), shard_over: int = 1) -> None:
        self.remote_buffer_id = next(_buffer_ids)
        self.set_remote_buffer_info(tensor_dtype, tensor_shape, entries)
        self.meta_shape = tuple(meta_shape)
        self.shard_over = shard_over
        self.shard_grouping: ReplicaGrouping | None = None  # whose groups split one value
        self.storage: np.ndarray | None = None  # set by the Session that runs the Ir

    def set_remote_buffer_info(self, tensor_dtype: dtype, tensor_shape: tuple[int, ...],
                               entries: int) -> None:
        """Set the spec of the entries and their number (before a Session allocates it)."""
        if self.__dict__.get("storage") is not None:
            raise RuntimeError(f"{self} is allocated by a Session; its spec cannot change")
        if int(entries) < 1:
            raise ValueError(f"a remote buffer needs at least one entry, got {entries}")
        self.tensor_shape = tuple(int(d) for d in tensor_shape)
        self.tensor_dtype = tensor_dtype
        self.entries = int(entries)

    def validate_tensor_matches_buffer(self, t: Tensor, num_shards: int = 1) -> None:
        """Raise ``ValueError`` unless ``t`` (one of ``num_shards`` shards of a tensor, when
        sharded) has the buffer's entry spec."""
        shape = t.shape
        if num_shards > 1:
            shape = (math.ceil(math.prod(t.shape) / num_shards),)
        if shape != self.tensor_shape or t.dtype is not self.tensor_dtype:
            raise ValueError(
                f"tensor {t.id} ({t.dtype.name}{list(t.shape)}, {num_shards} shard(s)) does not "
                f"match the remote buffer's tensor_shape {self.tensor_shape} and tensor_dtype "
                f"{self.tensor_dtype.name}")

    def check_entry(self, index: Any, what: str) -> int:
        """``index`` as an int when it names an entry of this buffer; otherwise ``IndexError``
        naming ``what``, the buffer, the index and the valid range (-1 never wraps around)."""
        ok = isinstance(index, numbers.Integral) and not isinstance(index, bool)
        if not ok or not 0 <= int(index) < self.entries:
            raise IndexError(f"{what} {index!r} is outside {self}; valid entries are 0 to "
                             f"{self.entries - 1}")
        return int(index)

    def __repr__(self) -> str:
        return (f"RemoteBuffer[id={self.remote_buffer_id} {self.tensor_dtype.name}"
                f"{list(self.tensor_shape)} x {self.entries}]")


@dataclass(frozen=True)
class RemoteLocation:
    """Where a remote variable lives: an entry of a buffer, whole or sharded over replicas."""

    buffer: RemoteBuffer
    offset: int
    sharded: bool
