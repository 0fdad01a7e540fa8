"""Remote (off-chip, streaming) memory: buffers of entries, variables stored in them, and
replica-sharded variables (replicated tensor sharding).

The simulator keeps each buffer in host memory, one copy per replica (``Session`` allocates it
as ``buffer.storage``); ``ops.remote_load`` / ``ops.remote_store`` move one entry between it
and the program. A remote variable is a Variable stored in an entry: the program reaches it only
through ``remote_load``, ``Session.get_tensor_data`` reads the entry.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from xlgraph.context import get_ir
from xlgraph.dtypes import dtype
from xlgraph.errors import ShapeError, user_source_line
from xlgraph.replica_grouping import ReplicaGrouping
from xlgraph.tensor import Tensor, Variable, variable
from xlgraph.utils import to_numpy

__all__ = ["RemoteBuffer", "remote_buffer", "remote_variable", "remote_replica_sharded_variable",
           "replica_sharded_buffer", "replica_sharded_variable", "RemoteLocation"]

_buffer_ids = itertools.count(1)


class RemoteBuffer:
    """``entries`` slots of ``tensor_shape``/``tensor_dtype`` in off-chip memory, per replica.

    For a replica-sharded buffer, ``tensor_shape`` is one shard, ``meta_shape`` the whole tensor
    and ``shard_over`` the number of replicas that split it.
    """

    def __init__(self, tensor_shape: tuple[int, ...], tensor_dtype: dtype, entries: int, *,
                 meta_shape: tuple[int, ...] = (), shard_over: int = 1) -> None:
        self.remote_buffer_id = next(_buffer_ids)
        self.set_remote_buffer_info(tensor_dtype, tensor_shape, entries)
        self.meta_shape = tuple(meta_shape)
        self.shard_over = shard_over
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

    def __repr__(self) -> str:
        return (f"RemoteBuffer[id={self.remote_buffer_id} {self.tensor_dtype.name}"
                f"{list(self.tensor_shape)} x {self.entries}]")


@dataclass(frozen=True)
class RemoteLocation:
    """Where a remote variable lives: an entry of a buffer, whole or sharded over replicas."""

    buffer: RemoteBuffer
    offset: int
    sharded: bool


def remote_buffer(tensor_shape: tuple[int, ...], tensor_dtype: dtype,
                  entries: int = 1) -> RemoteBuffer:
    """A new remote buffer of the current Ir."""
    buffer = RemoteBuffer(tensor_shape, tensor_dtype, entries)
    get_ir().remote_buffers.append(buffer)
    return buffer


def replica_sharded_buffer(shape: tuple[int, ...], dtype: dtype,
                           replica_grouping: ReplicaGrouping | None = None,
                           shard_over: int | None = None, entries: int = 1) -> RemoteBuffer:
    """A buffer for tensors of ``shape`` split over ``shard_over`` replicas (default: the
    group size), each keeping a flat, zero-padded shard."""
    ir = get_ir()
    if shard_over is None:
        shard_over = (replica_grouping or ir.replica_grouping()).group_size
    if ir.replication_factor % shard_over:
        raise ValueError(f"shard_over={shard_over} does not divide {ir.replication_factor} "
                         f"replicas")
    shard = math.ceil(math.prod(shape) / shard_over)
    buffer = RemoteBuffer((shard,), dtype, entries, meta_shape=tuple(shape), shard_over=shard_over)
    ir.remote_buffers.append(buffer)
    return buffer


def _check_entry(buffer: RemoteBuffer, offset: int, name: str | None) -> None:
    if not 0 <= offset < buffer.entries:
        raise IndexError(f"remote variable {name!r}: offset {offset} is outside {buffer} "
                         f"[at {user_source_line()}]")


def remote_variable(data: Any, remote_buffer: RemoteBuffer, offset: int = 0,
                    dtype: dtype | None = None, name: str | None = None, downcast: bool = True,
                    replica_grouping: ReplicaGrouping | None = None,
                    retrieval_mode: str | None = "one_per_group", log2_scale: int | None = None,
                    nan_on_overflow: bool | None = None) -> Variable:
    """A variable stored in entry ``offset`` of ``remote_buffer``; load it with
    ``ops.remote_load``. Arguments as for ``variable``."""
    _check_entry(remote_buffer, offset, name)
    v = variable(data, dtype or remote_buffer.tensor_dtype, name, downcast,
                 replica_grouping=replica_grouping, retrieval_mode=retrieval_mode,
                 log2_scale=log2_scale, nan_on_overflow=nan_on_overflow)
    if v.shape != remote_buffer.tensor_shape or v.dtype is not remote_buffer.tensor_dtype:
        raise ShapeError(f"remote variable {v.id} is {v.spec} but {remote_buffer} holds "
                         f"{remote_buffer.tensor_dtype.name}{list(remote_buffer.tensor_shape)}")
    v.remote = RemoteLocation(remote_buffer, offset, sharded=False)
    return v


def remote_replica_sharded_variable(data: Any, remote_buffer: RemoteBuffer, offset: int = 0,
                                    dtype: dtype | None = None, name: str | None = None,
                                    downcast: bool = True,
                                    replica_grouping: ReplicaGrouping | None = None,
                                    retrieval_mode: str | None = "one_per_group",
                                    log2_scale: int | None = None,
                                    nan_on_overflow: bool | None = None) -> Variable:
    """A variable of the buffer's ``meta_shape`` whose replicas each store one shard in entry
    ``offset``."""
    _check_entry(remote_buffer, offset, name)
    arr = to_numpy(data, dtype or remote_buffer.tensor_dtype, downcast, log2_scale=log2_scale,
                   nan_on_overflow=nan_on_overflow)
    if arr.shape != remote_buffer.meta_shape:
        raise ShapeError(f"replica-sharded variable {name!r}: data of shape {arr.shape} for "
                         f"{remote_buffer}, which shards tensors of shape "
                         f"{remote_buffer.meta_shape}")
    v = variable(arr, name=name, replica_grouping=replica_grouping,
                 retrieval_mode=retrieval_mode)
    v.remote = RemoteLocation(remote_buffer, offset, sharded=True)
    return v


def replica_sharded_variable(data: Any, dtype: dtype | None = None, name: str | None = None,
                             downcast: bool = True,
                             replica_grouping: ReplicaGrouping | None = None,
                             shard_over: int | None = None,
                             retrieval_mode: str | None = "one_per_group",
                             log2_scale: int | None = None,
                             nan_on_overflow: bool | None = None) -> tuple[Variable, Tensor]:
    """A replica-sharded remote variable and its shard loaded in the current graph:
    ``(variable, shard)``; ``shard.meta_shape`` is the variable's shape."""
    from xlgraph.ops.remote import remote_load

    arr = to_numpy(data, dtype, downcast, log2_scale=log2_scale, nan_on_overflow=nan_on_overflow)
    buffer = replica_sharded_buffer(arr.shape, dtype or _dtype_of(arr), replica_grouping,
                                    shard_over)
    v = remote_replica_sharded_variable(arr, buffer, 0, name=name,
                                        replica_grouping=replica_grouping,
                                        retrieval_mode=retrieval_mode)
    return v, remote_load(buffer, 0, name)


def _dtype_of(arr: np.ndarray) -> dtype:
    from xlgraph import dtypes

    return dtypes.of_array(arr)
