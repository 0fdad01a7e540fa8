"""Variables as the host sees them (PopXL's shapes) versus one value per local replica."""

from __future__ import annotations

import numpy as np

from xlgraph.ir import Ir
from xlgraph.tensor import Variable


class ReplicaLayout:
    """Converts variable data between the host shapes of ``Session`` calls and the device
    layout: ``shape`` without replicas, ``(local replicas,) + shape`` with them.

    Variables in ``held_once`` (replica-identical ones the plan keeps without the replica axis,
    see ``xlgraph.lower.replicas``) have ``shape`` on the device too, and so do those in
    ``one_replica``: an instance of one replica holds its replica's value without the axis.

    Host data is ``shape_on_host``: one value per replica group, a leading group dimension when
    there are several. ``get_tensor_data`` returns each group's value from its first replica
    run here (``retrieval_mode="one_per_group"``) or every local replica's value
    (``"all_replicas"``).
    """

    def __init__(self, ir: Ir) -> None:
        self.replicated = ir.replication_factor > 1
        self.total = ir.replication_factor
        self.local = ir.instance_replication_factor
        self.offset = ir.replica_offset
        self.mine = range(self.offset, self.offset + self.local)
        self.held_once: set[Variable] = set()
        self.one_replica: set[Variable] = set()

    def device_shape(self, v: Variable) -> tuple[int, ...]:
        if not self.replicated or v in self.held_once or v in self.one_replica:
            return v.shape
        return (self.local, *v.shape)

    def expand(self, v: Variable, host: np.ndarray) -> np.ndarray:
        """Host data (``shape_on_host``) as the device layout."""
        if not self.replicated or v in self.held_once:
            return host
        grouping = v.replica_grouping
        if grouping.num_groups == 1:
            return np.broadcast_to(host, self.device_shape(v))
        mine = host[[grouping.assignment[r] for r in self.mine]]
        return mine[0] if v in self.one_replica else mine

    def retrieve(self, v: Variable, device: np.ndarray, host: np.ndarray) -> np.ndarray:
        """What ``get_tensor_data`` returns, from the device layout; groups with no replica in
        this instance keep their ``host`` value."""
        if not self.replicated:
            return device.copy()
        if v in self.one_replica:
            device = device[None]
        if v in self.held_once:
            if v.retrieval_mode == "all_replicas" and self.local > 1:
                return np.repeat(device[None], self.local, axis=0)
            return device.copy()
        if v.retrieval_mode == "all_replicas":
            return device.copy() if self.local > 1 else device[0].copy()
        return self.group_values(v, device, host)

    def replica_values_shape(self, v: Variable) -> tuple[int, ...] | None:
        """The shape ``get_tensor_data`` gives an ``all_replicas`` variable (one value per
        local replica), or None when that is not how ``v`` is retrieved."""
        if not self.replicated or v.retrieval_mode != "all_replicas":
            return None
        return (self.local, *v.shape) if self.local > 1 else v.shape

    def from_replica_values(self, v: Variable, values: np.ndarray,
                            host: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(device layout, shape_on_host data)`` of ``values`` shaped as
        ``replica_values_shape``; a variable held once takes only one value for all replicas."""
        per = values.reshape((self.local, *v.shape))
        for members in v.replica_grouping.groups:  # one value per group, as PopXL stores it
            here = [r - self.offset for r in members if r in self.mine]
            if here and not (per[here] == per[here[:1]]).all():
                raise ValueError(
                    f"{v.id} holds one value per replica group ({v.replica_grouping}); got "
                    f"different values for the replicas {tuple(members)} of one group")
        if v in self.held_once:
            if not (per == per[:1]).all():
                raise ValueError(f"{v.id} holds one value for every replica (no replica changes "
                                 f"it on its own), got different values per replica")
            return per[0].copy(), self.group_values(v, per, host)
        return per[0] if v in self.one_replica else per, self.group_values(v, per, host)

    def group_values(self, v: Variable, device: np.ndarray, host: np.ndarray) -> np.ndarray:
        """``shape_on_host`` data from the device layout: each group's value from its first
        replica run here; groups with no replica here keep their ``host`` value."""
        grouping = v.replica_grouping
        values = []
        for g, members in enumerate(grouping.groups):
            here = [r for r in members if r in self.mine]
            fallback = host if grouping.num_groups == 1 else host[g]
            values.append(device[here[0] - self.offset] if here else fallback)
        return values[0].copy() if grouping.num_groups == 1 else np.stack(values)

    def one_per_group(self, v: Variable, device: np.ndarray, host: np.ndarray) -> np.ndarray:
        """``v``'s value in ``shape_on_host`` (one value per group), whatever its retrieval
        mode."""
        value = self.retrieve(v, device, host)
        if v.retrieval_mode != "all_replicas" or value.shape == v.shape_on_host:
            return value
        firsts = [members[0] for members in v.replica_grouping.groups]
        return value[firsts].reshape(v.shape_on_host)
