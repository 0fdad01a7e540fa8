"""``NamedReplicaGrouping``: replica groupings by dotted name, and instance-level helpers.

xlgraph runs every replica of an Ir in one instance unless it is launched with ``xlgraph-run``;
the instance helpers read the Ir's ``num_instances``.
"""

from __future__ import annotations

from collections.abc import Iterable

from xlgraph import ReplicaGrouping, gir
from xlgraph.addons.dot_tree import DotTree

__all__ = [
    "NamedReplicaGrouping",
    "fill_none_group",
    "get_instance_replica_grouping",
    "is_cross_instance",
    "get_ild_size_from_popdist",
    "get_ild_replica_grouping",
    "is_cross_ild",
]


def fill_none_group(rg: ReplicaGrouping | None, none_value: ReplicaGrouping | None = None,
                    ) -> ReplicaGrouping:
    """``rg``, or ``none_value`` when it is None (default: all replicas in one group)."""
    if rg is not None:
        return rg
    return none_value if none_value is not None else gir().replica_grouping()


class NamedReplicaGrouping(DotTree[ReplicaGrouping]):
    """Replica groupings by dotted name (one per variable of a ``NamedVariableFactories``)."""

    @classmethod
    def build_groups(cls, names: Iterable[str], value: ReplicaGrouping | None = None,
                     ) -> NamedReplicaGrouping:
        """The same grouping (None: all replicas) for every name."""
        return cls.from_dict({name: fill_none_group(value) for name in names})


def get_instance_replica_grouping(replica_grouping: ReplicaGrouping | None = None,
                                  ) -> ReplicaGrouping:
    """The grouping seen by this instance's replicas (all of them when there is one instance)."""
    ir = gir()
    rg = fill_none_group(replica_grouping)
    if ir.num_instances == 1:
        return rg
    first = ir.replica_offset
    local = rg.assignment[first:first + ir.instance_replication_factor]
    renumber = {g: i for i, g in enumerate(dict.fromkeys(local))}
    return ReplicaGrouping(len(local), [renumber[g] for g in local])


def is_cross_instance(replica_grouping: ReplicaGrouping | None = None) -> bool:
    """Whether one group spans replicas of more than one instance."""
    ir = gir()
    rg = fill_none_group(replica_grouping)
    per = ir.instance_replication_factor
    return any(len({r // per for r in members}) > 1 for members in rg.groups)


def get_ild_size_from_popdist() -> int:
    """Replicas per IPU-link domain: xlgraph has one domain per instance."""
    return gir().instance_replication_factor


def get_ild_replica_grouping(replica_grouping: ReplicaGrouping | None = None,
                             ) -> ReplicaGrouping:
    """The grouping within one IPU-link domain (one instance here)."""
    return get_instance_replica_grouping(replica_grouping)


def is_cross_ild(replica_grouping: ReplicaGrouping | None = None) -> bool:
    """Whether a group spans IPU-link domains (instances here)."""
    return is_cross_instance(replica_grouping)
