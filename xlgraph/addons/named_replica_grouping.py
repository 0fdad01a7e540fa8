"""``NamedReplicaGrouping``: replica groupings by dotted name, and instance-level helpers.

xlgraph runs every replica of an Ir in one instance unless it is launched with ``xlgraph-run``;
the instance helpers read the Ir's replicas per instance, the IPU-link-domain helpers
``POPLAR_TARGET_OPTIONS`` as popxl-addons does.
"""

from __future__ import annotations

import json
import logging
import os
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


def _bounded(rg: ReplicaGrouping | None, size: int, what: str) -> ReplicaGrouping:
    """``rg`` (default: all replicas) limited to ``size`` consecutive replicas: the same
    stride with ``size // stride`` members when a group would reach past them."""
    rg = fill_none_group(rg)
    if rg.stride > size:
        raise ValueError(f"replica grouping stride {rg.stride} is larger than the {what} "
                         f"({size} replicas)")
    if rg.group_size * rg.stride > size:
        return gir().replica_grouping(stride=rg.stride, group_size=size // rg.stride)
    return rg


def get_instance_replica_grouping(replica_grouping: ReplicaGrouping | None = None,
                                  ) -> ReplicaGrouping:
    """``replica_grouping`` (default: all replicas) bounded by one instance's replicas: the
    same stride and ``instance replicas // stride`` members when a group spans instances.

    Raises:
        ValueError: the stride exceeds an instance's replicas.
    """
    return _bounded(replica_grouping, gir().instance_replication_factor, "replicas of an "
                                                                            "instance")


def is_cross_instance(replica_grouping: ReplicaGrouping | None = None) -> bool:
    """Whether a group of ``replica_grouping`` spans more than one instance's replicas."""
    rg = fill_none_group(replica_grouping)
    return rg.group_size * rg.stride > gir().instance_replication_factor


_warned: list[bool] = []


def get_ild_size_from_popdist() -> int:
    """Replicas per IPU-link domain: ``ipuLinkDomainSize`` of the JSON in the environment
    variable ``POPLAR_TARGET_OPTIONS``; else ``min(replication factor, 64)`` (with a warning,
    once, when launched as several instances)."""
    options = os.environ.get("POPLAR_TARGET_OPTIONS")
    if options:
        try:
            size = json.loads(options).get("ipuLinkDomainSize")
        except (ValueError, AttributeError):
            size = None
        if size is not None:
            return int(size)
    ir = gir()
    if ir.num_instances > 1 and not _warned:
        _warned.append(True)
        logging.getLogger("popxl_addons").warning(
            "ipuLinkDomainSize not in POPLAR_TARGET_OPTIONS: taking min(replicas, 64)")
    return min(int(ir.replication_factor), 64)


def get_ild_replica_grouping(replica_grouping: ReplicaGrouping | None = None,
                             ) -> ReplicaGrouping:
    """``replica_grouping`` (default: all replicas) bounded by one IPU-link domain (see
    ``get_instance_replica_grouping``).

    Raises:
        ValueError: the stride exceeds the domain.
    """
    return _bounded(replica_grouping, get_ild_size_from_popdist(), "IPU-link domain")


def is_cross_ild(replica_grouping: ReplicaGrouping | None = None) -> bool:
    """Whether a group of ``replica_grouping`` spans more than one IPU-link domain."""
    rg = fill_none_group(replica_grouping)
    return rg.group_size * rg.stride > get_ild_size_from_popdist()
