"""``ReplicaGrouping``: which replicas form a group for collectives and grouped variables."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ReplicaGrouping", "CommGroupType", "CommGroup"]


class ReplicaGrouping:
    """A partition of ``num_replicas`` replicas into equal groups.

    Made by ``ir.replica_grouping(stride, group_size)`` (the members of a group are ``stride``
    apart) or ``ir.replica_grouping_from_assignments``. ``assignment[r]`` is the group of
    replica ``r``; groups are numbered by their first replica.

    Example:
        >>> ReplicaGrouping.from_stride(8, stride=2, group_size=4).assignment
        (0, 1, 0, 1, 0, 1, 0, 1)
    """

    def __init__(self, num_replicas: int, assignment: Sequence[int]) -> None:
        assignment = tuple(int(a) for a in assignment)
        if len(assignment) != num_replicas:
            raise ValueError(
                f"a replica grouping needs one group per replica ({num_replicas}), "
                f"got {len(assignment)} assignments"
            )
        order = list(dict.fromkeys(assignment))
        if sorted(order) != list(range(len(order))) or order != sorted(order):
            raise ValueError(
                f"group indices must be 0, 1, ... in order of their first replica, got {assignment}"
            )
        sizes = {assignment.count(g) for g in order}
        if len(sizes) != 1:
            raise ValueError(f"groups must all have the same size, got {assignment}")
        self.num_replicas = num_replicas
        self.assignment = assignment

    @classmethod
    def from_stride(cls, num_replicas: int, stride: int = 1,
                    group_size: int | None = None) -> ReplicaGrouping:
        """Groups of ``group_size`` replicas whose members are ``stride`` apart (PopXL's rule)."""
        group_size = num_replicas if group_size is None else int(group_size)
        stride = int(stride)
        block = stride * group_size
        if stride < 1 or group_size < 1 or num_replicas % block:
            raise ValueError(
                f"replica_grouping(stride={stride}, group_size={group_size}) does not divide "
                f"{num_replicas} replicas: stride * group_size must divide the replica count"
            )
        return cls(num_replicas, [(r // block) * stride + r % stride for r in range(num_replicas)])

    @property
    def num_groups(self) -> int:
        """How many groups the replicas form."""
        return max(self.assignment) + 1

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
        return self.assignment == tuple((r // block) * self.stride + r % self.stride
                                        for r in range(self.num_replicas))

    def members(self, group: int) -> tuple[int, ...]:
        """The replicas of ``group``, in order."""
        return tuple(r for r, g in enumerate(self.assignment) if g == group)

    @property
    def groups(self) -> tuple[tuple[int, ...], ...]:
        """The replica indices of each group."""
        return tuple(self.members(g) for g in range(self.num_groups))

    def transpose(self) -> ReplicaGrouping:
        """The grouping whose group ``i`` holds the ``i``-th member of every group here."""
        position = {r: i for members in self.groups for i, r in enumerate(members)}
        return ReplicaGrouping(self.num_replicas, [position[r] for r in range(self.num_replicas)])

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, ReplicaGrouping) and other.assignment == self.assignment)

    def __hash__(self) -> int:
        return hash(self.assignment)

    def __repr__(self) -> str:
        return (f"ReplicaGrouping(num_replicas={self.num_replicas}, stride={self.stride}, "
                f"group_size={self.group_size}, num_groups={self.num_groups})")


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
