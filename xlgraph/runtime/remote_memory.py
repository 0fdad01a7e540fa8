"""The simulator's off-chip memory: the storage of every remote buffer an Ir uses, one copy per
local replica, and the values of the remote variables kept there."""

from __future__ import annotations

from typing import Any

import numpy as np

from xlgraph.errors import DistributedError, GraphMismatchError
from xlgraph.ir import Ir
from xlgraph.remote import RemoteBuffer
from xlgraph.replica_grouping import ReplicaGrouping
from xlgraph.runtime.replica_layout import ReplicaLayout
from xlgraph.tensor import Variable


def _buffers(ir: Ir) -> list[RemoteBuffer]:
    found = {id(b): b for b in ir.remote_buffers}
    for g in ir.graphs:
        for op in g.ops:
            for value in op.attrs.values():
                if isinstance(value, RemoteBuffer):
                    found.setdefault(id(value), value)
    return list(found.values())


class RemoteMemory:
    """Allocates ``buffer.storage`` (``(entries, ...)``, or ``(local replicas, entries, ...)``
    with replicas) and reads and writes remote variables there."""

    def __init__(self, ir: Ir, layout: ReplicaLayout, exchange: Any = None) -> None:
        """``exchange``: the link to the other instances (``xlgraph.dist.exchange``), which
        reads of variables sharded over several instances go through."""
        self.layout = layout
        self.exchange = exchange
        self.buffers = _buffers(ir)
        lead = (layout.local,) if layout.replicated else ()
        for b in self.buffers:
            b.storage = np.zeros((*lead, b.entries, *b.tensor_shape), b.tensor_dtype.as_numpy())
        self.variables = [v for v in ir.main_graph.variables if getattr(v, "remote", None)]
        for op in (op for g in ir.graphs for op in g.ops):
            used = [t.id for t in op.inputs if t in self.variables]
            if used:
                raise GraphMismatchError(
                    f"{op.describe()} reads remote variable {used[0]} directly; load it with "
                    f"ops.remote_load(buffer, offset) first"
                )
        for v in self.variables:
            self.write(v, v.initial_data)

    def arrays(self) -> list[np.ndarray]:
        """Every buffer's storage (for the Session's snapshot of a run)."""
        return [b.storage for b in self.buffers]

    def _shard_groups(self, v: Variable) -> list[tuple[int, ...]]:
        """For each local replica of a sharded variable, the replicas that split its value
        (in shard order)."""
        buffer = v.remote.buffer
        grouping = buffer.shard_grouping or ReplicaGrouping.from_stride(
            self.layout.total, 1, buffer.shard_over)
        return [grouping.members(grouping.assignment[r]) for r in self.layout.mine]

    def _entry(self, v: Variable) -> np.ndarray:
        """The storage view of ``v``'s entry, with the replica axis when replicated."""
        storage, offset = v.remote.buffer.storage, v.remote.offset
        return storage[:, offset, ...] if self.layout.replicated else storage[offset, ...]

    def write(self, v: Variable, host: np.ndarray) -> None:
        """Store host data (``shape_on_host``) of remote variable ``v``: each replica its
        group's value, or its shard of it."""
        values = np.asarray(self.layout.expand(v, host))
        entry = self._entry(v)
        lead = values.shape[: values.ndim - v.rank]
        if not v.remote.sharded:
            entry[...] = values.reshape((*lead, *entry.shape[len(lead):]))  # () for scalars
            return
        shard, n = v.remote.buffer.tensor_shape[0], v.remote.buffer.shard_over
        flat = np.zeros((*lead, shard * n), values.dtype)
        flat[..., : v.nelms] = values.reshape(*lead, -1)
        if not self.layout.replicated:
            entry[...] = flat
            return
        for local, (r, members) in enumerate(zip(self.layout.mine, self._shard_groups(v),
                                                 strict=True)):
            index = members.index(r)
            entry[local] = flat[local, index * shard:(index + 1) * shard]

    def read(self, v: Variable, host: np.ndarray) -> np.ndarray:
        """What ``get_tensor_data`` returns for remote variable ``v``."""
        entry = self._entry(v)
        if v.remote.sharded:
            entry = self._unshard(v, entry)
        else:
            entry = entry.reshape((*entry.shape[: entry.ndim - len(v.remote.buffer.tensor_shape)],
                                   *v.shape))
        return self.layout.retrieve(v, entry, host)

    def _unshard(self, v: Variable, shards: np.ndarray) -> np.ndarray:
        """Each local replica's full value, from the shards of its shard group. A group spread
        over instances is gathered from them: every instance reads the variable (as every
        instance of a PopXL job calls ``get_tensor_data``), or the read fails naming it."""
        if not self.layout.replicated:
            return shards[: v.nelms].reshape(v.shape)
        groups = self._shard_groups(v)
        first = self.layout.offset
        if any(m not in self.layout.mine for members in groups for m in members):
            if self.exchange is None:
                raise DistributedError(
                    f"{v.id}: its shards are spread over instances; read it where a whole "
                    f"shard group of {v.remote.buffer.shard_over} replicas runs"
                )
            shards = self.exchange.allgather(np.ascontiguousarray(shards),
                                             f"read of sharded variable {v.id}")
            first = 0
        return np.stack([shards[[m - first for m in members]].reshape(-1)[: v.nelms]
                         .reshape(v.shape) for members in groups])
