"""``ReplicaGrouping``: which replicas form a group for collectives and grouped variables."""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ReplicaGrouping", "CommGroupType", "CommGroup", "VariableSettings",
           "VariableRetrievalMode"]

_DIRECT = ("Cannot create a ReplicaGrouping instance from its constructor directly: use "
           "`ir.replica_grouping(stride, group_size)` or "
           "`ir.replica_grouping_from_assignments(assignment)`")


class ReplicaGrouping:
    """A partition of ``num_replicas`` replicas into equal groups.

    Made by ``ir.replica_grouping(stride, group_size)`` (the members of a group are ``stride``
    apart) or ``ir.replica_grouping_from_assignments``; ``ReplicaGrouping()`` alone raises
    ``RuntimeError`` as in PopXL. ``assignment[r]`` is the group of replica ``r`` (a list);
    groups are numbered by their first replica.

    Example:
        >>> ReplicaGrouping.from_stride(8, stride=2, group_size=4).assignment
        [0, 1, 0, 1, 0, 1, 0, 1]
    """

    def __init__(self, num_replicas: int | None = None,
                 assignment: Sequence[int] | None = None) -> None:
        if num_replicas is None or assignment is None:
            raise RuntimeError(_DIRECT)
        assignment = tuple(int(a) for a in assignment)
        if len(assignment) != num_replicas:
            raise ValueError(
                f"a replica grouping needs one group per replica ({num_replicas}), "
                f"got {len(assignment)} assignments"
            )
        order = list(dict.fromkeys(assignment))
        if sorted(order) != list(range(len(order))) or order != sorted(order):
            raise ValueError(
                f"group indices must be 0, 1, ... in order of their first replica, got "
                f"{list(assignment)}"
            )
        sizes = {assignment.count(g) for g in order}
        if len(sizes) != 1:
            raise ValueError(f"groups must all have the same size, got {list(assignment)}")
        self.num_replicas = num_replicas
        self._assignment = assignment

    @classmethod
    def from_stride(cls, num_replicas: int, stride: int = 1,
                    group_size: int | None = None) -> ReplicaGrouping:
        """Groups of ``group_size`` replicas whose members are ``stride`` apart (PopXL's rule:
        ``group_size`` defaults to ``num_replicas // stride``; a group of one has stride 1)."""
        stride = int(stride)
        if not 0 < stride <= num_replicas or num_replicas % stride:
            raise ValueError(f"Stride must be a positive integer that divides the replication "
                             f"factor ({num_replicas}), got stride={stride}")
        group_size = num_replicas // stride if group_size is None else int(group_size)
        if not 0 < group_size <= num_replicas:
            raise ValueError(f"Group size must be between 1 and the replication factor "
                             f"({num_replicas}), got group_size={group_size}")
        stride = 1 if group_size == 1 else stride
        block = stride * group_size
        if num_replicas % block:
            raise ValueError(
                f"replica_grouping(stride={stride}, group_size={group_size}) does not divide "
                f"{num_replicas} replicas: stride * group_size must divide the replica count"
            )
        return cls(num_replicas, [(r // block) * stride + r % stride for r in range(num_replicas)])

    @property
    def assignment(self) -> list[int]:
        """The group of each replica, e.g. ``[0, 1, 0, 1]``."""
        return list(self._assignment)

    @property
    def num_groups(self) -> int:
        """How many groups the replicas form."""
        return max(self._assignment) + 1

    @property
    def group_size(self) -> int:
        """How many replicas each group holds."""
        return self.num_replicas // self.num_groups

    @property
    def stride(self) -> int:
        """The distance between consecutive members of group 0 (1 for a single replica)."""
        members = self.members(0)
        return members[1] - members[0] if len(members) > 1 else 1

    @property
    def is_const(self) -> bool:
        """Whether a stride and a group size describe the grouping (``ir.replica_grouping``
        makes such groupings; ``replica_grouping_from_assignments`` may not)."""
        block = self.stride * self.group_size
        if self.num_replicas % block:
            return False
        return self._assignment == tuple((r // block) * self.stride + r % self.stride
                                         for r in range(self.num_replicas))

    @property
    def const_rg(self) -> ReplicaGrouping:
        """This grouping when it is constant-stride; else the coarsest constant-stride grouping
        that splits each of its groups (variables of a non-constant grouping are held on the
        device under it, and sharded over its groups)."""
        if self.is_const:
            return self
        runs = [run for members in self.groups for run in _runs(members)]
        stride = min((run[1] - run[0] for run in runs if len(run) > 1), default=1)
        size = math.gcd(*(len(run) for run in runs))
        try:
            rg = ReplicaGrouping.from_stride(self.num_replicas, stride, size)
        except ValueError:  # the runs' stride and size tile no constant grouping
            return ReplicaGrouping.from_stride(self.num_replicas, 1, 1)
        if all(len({self._assignment[r] for r in g}) == 1 for g in rg.groups):
            return rg
        return ReplicaGrouping.from_stride(self.num_replicas, 1, 1)

    @property
    def to_device_map(self) -> list[int] | None:
        """For each group of ``const_rg``, the group here that holds it (None when constant)."""
        if self.is_const:
            return None
        return [self._assignment[g[0]] for g in self.const_rg.groups]

    @property
    def to_host_map(self) -> list[int] | None:
        """For each group here, its first group of ``const_rg`` (None when constant)."""
        if self.is_const:
            return None
        device = self.to_device_map
        return [device.index(g) for g in range(self.num_groups)]

    def _to_variable_settings(self, retrieval_mode: Any = None) -> VariableSettings:
        """PopART's ``VariableSettings`` of a variable with this grouping (its ``const_rg``)."""
        mode = getattr(retrieval_mode, "value", retrieval_mode)
        if mode is None or mode == "one_per_group":
            chosen = VariableRetrievalMode.OnePerGroup
        elif mode == "all_replicas":
            chosen = VariableRetrievalMode.AllReplicas
        else:
            raise ValueError(f"Invalid retrieval_mode: {retrieval_mode}")
        rg = self.const_rg
        return VariableSettings(rg.stride, rg.group_size, chosen)

    def members(self, group: int) -> tuple[int, ...]:
        """The replicas of ``group``, in order."""
        return tuple(r for r, g in enumerate(self._assignment) if g == group)

    @property
    def groups(self) -> tuple[tuple[int, ...], ...]:
        """The replica indices of each group."""
        return tuple(self.members(g) for g in range(self.num_groups))

    def transpose(self) -> ReplicaGrouping:
        """The grouping whose group ``i`` holds the ``i``-th member of every group here."""
        position = {r: i for members in self.groups for i, r in enumerate(members)}
        return ReplicaGrouping(self.num_replicas, [position[r] for r in range(self.num_replicas)])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ReplicaGrouping) and other._assignment == self._assignment

    def __hash__(self) -> int:
        return hash(self._assignment)

    def __repr__(self) -> str:
        return (f"ReplicaGrouping(num_replicas={self.num_replicas}, stride={self.stride}, "
                f"group_size={self.group_size}, num_groups={self.num_groups})")


def _runs(members: tuple[int, ...]) -> list[tuple[int, ...]]:
    """``members`` (ascending) cut wherever the gap grows past the group's smallest gap."""
    gaps = [b - a for a, b in zip(members, members[1:], strict=False)]
    step = min(gaps, default=1)
    runs, start = [], 0
    for i, gap in enumerate(gaps, 1):
        if gap != step:
            runs.append(members[start:i])
            start = i
    runs.append(members[start:])
    return runs


class VariableRetrievalMode(enum.Enum):
    """What ``Session.get_tensor_data`` returns for a replica-grouped variable; the values are
    PopXL's ``retrieval_mode`` strings, and ``popxl.variable`` takes either."""

    OnePerGroup = "one_per_group"
    AllReplicas = "all_replicas"


@dataclass(frozen=True)
class VariableSettings:
    """PopART's ``VariableSettings`` as ``ReplicaGrouping._to_variable_settings`` gives it:
    the grouping's stride and group size, and the retrieval mode."""

    stride: int
    group_size: int
    retrieval_mode: VariableRetrievalMode = VariableRetrievalMode.OnePerGroup

    def groups(self, replication_factor: int) -> list[list[int]]:
        """The replicas of each group, groups in order, members ascending."""
        rg = ReplicaGrouping.from_stride(replication_factor, self.stride, self.group_size)
        return [list(members) for members in rg.groups]

    def getGroupCount(self, replication_factor: int) -> int:  # noqa: N802 - PopART's name
        """How many groups ``replication_factor`` replicas form."""
        return len(self.groups(replication_factor))

    def getRetrievalMode(self) -> VariableRetrievalMode:  # noqa: N802 - PopART's name
        """The retrieval mode."""
        return self.retrieval_mode


class CommGroupType(enum.Enum):
    """PopART's older way to name replica groups (``popxl.ops.collectives.CommGroupType``)."""

    All = 0  # noqa: A003 - PopART's name
    Consecutive = 1
    Orthogonal = 2
    Ungrouped = 3


@dataclass(frozen=True)
class CommGroup:
    """A ``CommGroupType`` with PopART's ``replicaGroupSize`` (its meaning depends on the type:
    the size of each consecutive group, or the number of orthogonal groups)."""

    type: CommGroupType = CommGroupType.All  # noqa: A003 - PopART's name
    replicaGroupSize: int = 0  # noqa: N815 - PopART's name

    def to_replica_grouping(self, num_replicas: int) -> ReplicaGrouping:
        """The same groups as a ``ReplicaGrouping`` of ``num_replicas`` replicas."""
        size = self.replicaGroupSize
        if self.type is CommGroupType.All:
            return ReplicaGrouping.from_stride(num_replicas)
        if self.type is CommGroupType.Ungrouped:
            return ReplicaGrouping.from_stride(num_replicas, 1, 1)
        if size < 1 or num_replicas % size:
            raise ValueError(f"{self}: replicaGroupSize must divide {num_replicas} replicas")
        if self.type is CommGroupType.Consecutive:
            return ReplicaGrouping.from_stride(num_replicas, 1, size)
        return ReplicaGrouping.from_stride(num_replicas, size, num_replicas // size)
