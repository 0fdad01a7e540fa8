"""Remote (off-chip, streaming) memory: buffers of entries, variables stored in them, and
replica-sharded variables (replicated tensor sharding).

The simulator keeps each buffer in host memory, one copy per replica (``Session`` allocates it
as ``buffer.storage``); ``ops.remote_load`` / ``ops.remote_store`` move one entry between it
and the program. A remote variable is a Variable stored in an entry: the program reaches it only
through ``remote_load``, ``Session.get_tensor_data`` reads the entry.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from xlgraph.context import get_ir
from xlgraph.core.remote_buffer import RemoteBuffer, RemoteLocation
from xlgraph.dtypes import dtype
from xlgraph.errors import ShapeError, user_source_line
from xlgraph.replica_grouping import ReplicaGrouping
from xlgraph.tensor import Tensor, Variable, variable
from xlgraph.utils import to_numpy

__all__ = ["RemoteBuffer", "remote_buffer", "remote_variable", "remote_replica_sharded_variable",
           "replica_sharded_buffer", "replica_sharded_variable", "RemoteLocation",
           "store_weight_shards"]


def remote_buffer(tensor_shape: tuple[int, ...], tensor_dtype: dtype,
                  entries: int = 1) -> RemoteBuffer:
    """A new remote buffer of the current Ir."""
    buffer = RemoteBuffer(tensor_shape, tensor_dtype, entries)
    get_ir().remote_buffers.append(buffer)
    return buffer


def replica_sharded_buffer(shape: tuple[int, ...], dtype: dtype,
                           replica_grouping: ReplicaGrouping | None = None,
                           shard_over: int | ReplicaGrouping | None = None,
                           entries: int = 1) -> RemoteBuffer:
    """A buffer for tensors of ``shape`` split over ``shard_over`` replicas (default: the
    group size; a ReplicaGrouping counts its group size), each keeping a flat, zero-padded
    shard."""
    ir = get_ir()
    if shard_over is None:
        shard_over = (replica_grouping or ir.replica_grouping()).group_size
    elif isinstance(shard_over, ReplicaGrouping):  # a grouping: shard over its members
        shard_over = shard_over.group_size
    if ir.replication_factor % shard_over:
        raise ValueError(f"shard_over={shard_over} does not divide {ir.replication_factor} "
                         f"replicas")
    shard = math.ceil(math.prod(shape) / shard_over)
    buffer = RemoteBuffer((shard,), dtype, entries, meta_shape=tuple(shape), shard_over=shard_over)
    ir.remote_buffers.append(buffer)
    return buffer


def _check_entry(buffer: RemoteBuffer, offset: int, name: str | None) -> None:
    try:
        buffer.check_entry(offset, f"remote variable {name!r}: offset")
    except IndexError as exc:
        raise IndexError(f"{exc} [at {user_source_line()}]") from None


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
    arr = to_numpy(data, dtype or remote_buffer.tensor_dtype, downcast,
                   copy=not isinstance(data, np.memmap), log2_scale=log2_scale,
                   nan_on_overflow=nan_on_overflow)  # a memmap stays one (written back)
    if not remote_buffer.meta_shape and remote_buffer.storage is None:
        _shard_plain_buffer(remote_buffer, arr, replica_grouping, name)
    if arr.shape != remote_buffer.meta_shape:
        raise ShapeError(f"replica-sharded variable {name!r}: data of shape {arr.shape} for "
                         f"{remote_buffer}, which shards tensors of shape "
                         f"{remote_buffer.meta_shape}")
    v = variable(arr, name=name, replica_grouping=replica_grouping,
                 retrieval_mode=retrieval_mode)
    v.remote = RemoteLocation(remote_buffer, offset, sharded=True)
    return v


def _shard_plain_buffer(buffer: RemoteBuffer, arr: np.ndarray,
                        replica_grouping: ReplicaGrouping | None, name: str | None) -> None:
    """Give a plain buffer (``remote_buffer((shard,), dtype)``) the meta_shape of the tensor
    it shards, as PopXL's ``remote_replica_sharded_variable`` does; its entries must hold one
    flat shard of ``ceil(nelms / group size)`` elements."""
    shard_over = (replica_grouping or get_ir().replica_grouping()).group_size
    shard = (math.ceil(arr.size / shard_over),)
    if buffer.tensor_shape != shard:
        raise ShapeError(
            f"replica-sharded variable {name!r}: data of shape {arr.shape} split over "
            f"{shard_over} replicas needs entries of shape {shard}, but {buffer} holds "
            f"{buffer.tensor_dtype.name}{list(buffer.tensor_shape)} [at {user_source_line()}]")
    buffer.meta_shape = arr.shape
    buffer.shard_over = shard_over


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

    arr = to_numpy(data, dtype, downcast, copy=not isinstance(data, np.memmap),
                   log2_scale=log2_scale, nan_on_overflow=nan_on_overflow)
    buffer = replica_sharded_buffer(arr.shape, dtype or _dtype_of(arr), replica_grouping,
                                    shard_over)
    v = remote_replica_sharded_variable(arr, buffer, 0, name=name,
                                        replica_grouping=replica_grouping,
                                        retrieval_mode=retrieval_mode)
    shard = remote_load(buffer, 0, name)
    get_ir().weight_shards.append((buffer, shard))
    return v, shard


def store_weight_shards(ir: Any) -> None:
    """Store each ``replica_sharded_variable`` shard back in its buffer at the end of the main
    program, as PopXL's WeightsToHost program does (it loads the shard in WeightsFromHost):
    in-place updates of the shard (``copy_var_update_``, ``accumulate_``, ...) reach the
    variable's data. The Session calls this once, before lowering."""
    from xlgraph.ops.remote import remote_store

    pending, ir.weight_shards = ir.weight_shards, []
    for buffer, shard in pending:
        latest = shard  # the output of the last in-place op that modified the whole shard
        for op in ir.main_graph.ops:
            if (op.defn.modifies_input and op.inputs[op.defn.inplace_of] is latest
                    and op.outputs and op.outputs[0].shape == shard.shape):
                latest = op.outputs[0]
        if latest is shard:
            continue  # never modified here: the program loads and stores the buffer itself
        with ir.main_graph:
            remote_store(buffer, 0, latest)


def _dtype_of(arr: np.ndarray) -> dtype:
    from xlgraph import dtypes

    return dtypes.of_array(arr)
