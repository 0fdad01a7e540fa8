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
    """A buffer for the variables of ``replica_grouping`` (its ``const_rg``), each group's value
    split over ``shard_over`` of its replicas (default: the group size), each keeping a flat,
    zero-padded shard. With several groups ``shape`` leads with the group dimension, which the
    buffer's ``meta_shape`` (one group's value) drops, as in PopXL."""
    ir = get_ir()
    grouping = (replica_grouping or ir.replica_grouping()).const_rg
    if grouping.num_groups > 1:
        shape = tuple(shape)[1:]
    if shard_over is None:
        shard_over = grouping.group_size
    elif isinstance(shard_over, ReplicaGrouping):  # a grouping: shard over its members
        shard_over = shard_over.group_size
    _check_shard_over(int(shard_over), grouping)
    buffer = RemoteBuffer((math.ceil(math.prod(shape) / shard_over),), dtype, entries)
    _shard(buffer, tuple(shape), grouping, int(shard_over))
    ir.remote_buffers.append(buffer)
    return buffer


def _check_shard_over(shard_over: int, grouping: ReplicaGrouping) -> None:
    if not 0 < shard_over <= grouping.group_size:
        raise ValueError(f"shard_over ({shard_over}) must be between 1 and the replica "
                         f"grouping's group size ({grouping.group_size}) [at "
                         f"{user_source_line()}]")
    if grouping.group_size % shard_over:
        raise ValueError(f"shard_over ({shard_over}) must divide the replica grouping's group "
                         f"size ({grouping.group_size}) [at {user_source_line()}]")


def _shard(buffer: RemoteBuffer, meta_shape: tuple[int, ...], grouping: ReplicaGrouping,
           shard_over: int) -> None:
    """Make ``buffer`` hold shards of ``meta_shape`` tensors: ``shard_over`` consecutive members
    of each group of ``grouping`` split one value, in the order of the group's members."""
    buffer.meta_shape = meta_shape
    buffer.shard_over = shard_over
    buffer.shard_grouping = ReplicaGrouping.from_stride(grouping.num_replicas, grouping.stride,
                                                        shard_over)


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
    ``ops.remote_load``. Arguments as for ``variable``. As in PopXL the value's shape need not be
    the entry shape, only its element count: ``ops.remote_load`` gives the entry shape."""
    _check_entry(remote_buffer, offset, name)
    v = variable(data, dtype or remote_buffer.tensor_dtype, name, downcast,
                 replica_grouping=replica_grouping, retrieval_mode=retrieval_mode,
                 log2_scale=log2_scale, nan_on_overflow=nan_on_overflow)
    if v.nelms != math.prod(remote_buffer.tensor_shape) or \
            v.dtype is not remote_buffer.tensor_dtype:
        raise ShapeError(f"remote variable {v.id} is {v.spec} but {remote_buffer} holds "
                         f"{remote_buffer.tensor_dtype.name}{list(remote_buffer.tensor_shape)} "
                         f"[at {user_source_line()}]")
    v.remote = RemoteLocation(remote_buffer, offset, sharded=False)
    return v


def remote_replica_sharded_variable(data: Any, remote_buffer: RemoteBuffer, offset: int = 0,
                                    dtype: dtype | None = None, name: str | None = None,
                                    downcast: bool = True,
                                    replica_grouping: ReplicaGrouping | None = None,
                                    retrieval_mode: str | None = "one_per_group",
                                    log2_scale: int | None = None,
                                    nan_on_overflow: bool | None = None) -> Variable:
    """A variable (one value per group of ``replica_grouping``) whose value each group splits
    over its replicas, each storing one flat shard in entry ``offset``. A buffer without a
    ``meta_shape`` gets the variable's (and entries of one shard); one with another
    ``meta_shape`` is refused (``ValueError``), as in PopXL."""
    ir = get_ir()
    if ir.replication_factor <= 1:
        raise ValueError(f"replica-sharded variable {name!r} needs more than one replica, the "
                         f"Ir has replication_factor {ir.replication_factor} [at "
                         f"{user_source_line()}]")
    _check_entry(remote_buffer, offset, name)
    grouping = replica_grouping or ir.replica_grouping()
    arr = to_numpy(data, dtype or remote_buffer.tensor_dtype, downcast,
                   copy=not isinstance(data, np.memmap), log2_scale=log2_scale,
                   nan_on_overflow=nan_on_overflow)  # a memmap stays one (written back)
    meta = arr.shape[1:] if grouping.num_groups > 1 else arr.shape
    if not remote_buffer.meta_shape and remote_buffer.storage is None:
        const = grouping.const_rg
        remote_buffer.set_remote_buffer_info(
            remote_buffer.tensor_dtype, (math.ceil(math.prod(meta) / const.group_size),),
            remote_buffer.entries)
        _shard(remote_buffer, meta, const, const.group_size)
    elif tuple(remote_buffer.meta_shape) != tuple(meta):
        raise ValueError(f"Cannot use {remote_buffer} for replica sharded variable of shape "
                         f"{meta}: the buffer's meta_shape is {remote_buffer.meta_shape} [at "
                         f"{user_source_line()}]")
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
