"""Replica-grouped parameters: ``param.replicaGrouping(comm_group_type, shards, mode)``.

As in PopTorch's user guide (``replica_grouped_weights.py``), a parameter of a model with
``opts.replicationFactor(R)`` may hold one value per group of replicas instead of one for all.
Its torch tensor then has a leading dimension of one entry per group; ``forward`` sees the
entry of its replica's group (traced with group 0's entry), and in training each group's value
takes the gradient reduced over that group's replicas only. ``CommGroupType`` names the groups
with ``shards`` the size of each group, for every type (PopTorch's reading, which differs from
PopXL's ``CommGroup``): ``Consecutive`` makes groups of ``shards`` consecutive replicas,
``Orthogonal`` makes ``R / shards`` groups of ``shards`` replicas each, replica ``r`` in group
``r % (R / shards)`` (8 replicas, ``Orthogonal, 2``: ``[0, 4] [1, 5] [2, 6] [3, 7]``),
``NoGrouping`` gives each replica its own value and ``All`` is the ordinary shared parameter.

The host sees one value per group: copies back to the module (``copyWeightsToHost``, reads of a
trained parameter) and ``VariableRetrievalMode.OnePerGroup`` return the ``(groups, ...)`` tensor.
``AllReplicas`` is accepted and gives the same tensor: the replicas of a group hold equal values,
and the torch parameter keeps its shape.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from xlgraph.poptorch.enums import CommGroupType, VariableRetrievalMode
from xlgraph.poptorch.support import Error
from xlgraph.replica_grouping import CommGroup, ReplicaGrouping
from xlgraph.replica_grouping import CommGroupType as _XlCommGroupType

__all__ = ["replicaGrouping", "grouping_of", "groupings", "traced_per_replica", "install"]

_ATTR = "_xlgraph_replica_grouping"
_TYPES = {CommGroupType.All: _XlCommGroupType.All,
          CommGroupType.Consecutive: _XlCommGroupType.Consecutive,
          CommGroupType.Orthogonal: _XlCommGroupType.Orthogonal,
          CommGroupType.NoGrouping: _XlCommGroupType.Ungrouped}


def replicaGrouping(self: torch.nn.Parameter, comm_group_type: CommGroupType,  # noqa: N802
                    shards: int,
                    variable_retrieval_mode: VariableRetrievalMode
                    = VariableRetrievalMode.OnePerGroup) -> None:
    """Give this parameter one value per group of replicas (before the model compiles).

    Args:
        comm_group_type: ``poptorch.CommGroupType``: how the replicas are grouped.
        shards: the number of replicas in each group.
        variable_retrieval_mode: ``poptorch.VariableRetrievalMode``: what the host reads back.
    """
    try:
        kind = CommGroupType(comm_group_type)
        mode = VariableRetrievalMode(variable_retrieval_mode)
    except ValueError as exc:
        raise Error(f"replicaGrouping: {exc}; use poptorch.CommGroupType and "
                    f"poptorch.VariableRetrievalMode") from None
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 0:
        raise Error(f"replicaGrouping: shards must be a whole number >= 0, got {shards!r}")
    setattr(self, _ATTR, (kind, shards, mode))


def grouping_of(tensor: torch.Tensor, key: str, replicas: int) -> ReplicaGrouping | None:
    """The replica grouping ``replicaGrouping`` gave ``tensor`` (``key`` names it), None when
    it has one value for all replicas.

    Raises:
        Error: the grouping does not divide the replicas, or the tensor's leading dimension is
            not one entry per group.
    """
    setting = getattr(tensor, _ATTR, None)
    if setting is None:
        return None
    kind, shards, _ = setting
    try:
        if kind is CommGroupType.Orthogonal:
            if shards < 1 or replicas % shards:
                raise ValueError(f"the group size {shards} must divide {replicas} replicas")
            grouping = ReplicaGrouping.from_stride(replicas, replicas // shards, shards)
        else:
            grouping = CommGroup(_TYPES[kind], shards).to_replica_grouping(replicas)
    except ValueError as exc:
        raise Error(f"parameter {key!r}: replicaGrouping({kind.name}, {shards}) does not group "
                    f"replicationFactor({replicas}): {exc}") from None
    if grouping.num_groups == 1:
        return None
    if tensor.dim() == 0 or tensor.shape[0] != grouping.num_groups:
        raise Error(f"parameter {key!r}: replicaGrouping({kind.name}, {shards}) makes "
                    f"{grouping.num_groups} groups of {replicas} replicas, so its first "
                    f"dimension must be {grouping.num_groups} (one value per group); its shape "
                    f"is {tuple(tensor.shape)}")
    return grouping


def groupings(module: torch.nn.Module, replicas: int) -> dict[str, ReplicaGrouping]:
    """The grouped parameters of ``module`` by ``state_dict`` key."""
    out = {}
    for key, p in module.named_parameters():
        grouping = grouping_of(p, key, replicas)
        if grouping is not None:
            out[key] = grouping
    return out


@contextlib.contextmanager
def traced_per_replica(module: torch.nn.Module, groupings: dict[str, Any]) -> Iterator[None]:
    """Within the block, each grouped parameter of ``module`` (``groupings`` by key) is its
    group-0 entry, the shape one replica computes with; the parameters come back after."""
    swapped = []
    try:
        for key in groupings:
            path, _, name = key.rpartition(".")
            owner = module.get_submodule(path)
            full = owner._parameters[name]
            owner._parameters[name] = torch.nn.Parameter(full.detach()[0].clone(),
                                                         requires_grad=full.requires_grad)
            swapped.append((owner, name, full))
        yield
    finally:
        for owner, name, full in swapped:
            owner._parameters[name] = full


def install() -> None:
    """Make ``replicaGrouping`` a method of ``torch.nn.Parameter``, as PopTorch does."""
    torch.nn.Parameter.replicaGrouping = replicaGrouping  # type: ignore[attr-defined]
