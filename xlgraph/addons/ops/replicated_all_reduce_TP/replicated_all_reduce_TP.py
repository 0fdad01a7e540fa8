"""``popxl_addons.ops.replicated_all_reduce_TP``: the tensor-parallel all-reduce pair (forward
identity / backward sum, and the reverse) and the plain all-reduce, sum only."""

from __future__ import annotations

from xlgraph import Tensor
from xlgraph.op import explained
from xlgraph.ops import tp_collectives
from xlgraph.ops.tp_collectives import check_tp_op
from xlgraph.replica_grouping import ReplicaGrouping

__all__ = ["replicated_all_reduce_identical_inputs",
           "replicated_all_reduce_identical_grad_inputs", "replicated_all_reduce"]


@explained("replicated_all_reduce_identical_inputs")
def replicated_all_reduce_identical_inputs(t: Tensor, op: str = "add",
                                           group: ReplicaGrouping | None = None) -> Tensor:
    """Forward a copy of ``t`` (alike on every member of ``group``, default all replicas);
    the gradient is the sum all-reduce over the group."""
    return tp_collectives.replicated_all_reduce_strided_identical_inputs(
        t, check_tp_op(op, ("add",)), group)


@explained("replicated_all_reduce_identical_grad_inputs")
def replicated_all_reduce_identical_grad_inputs(t: Tensor, op: str = "add",
                                                group: ReplicaGrouping | None = None) -> Tensor:
    """The sum all-reduce of ``t`` over ``group`` (default all replicas); the gradient passes
    through unchanged."""
    return tp_collectives.replicated_all_reduce_strided_identical_grad_inputs(
        t, check_tp_op(op, ("add",)), group)


@explained("replicated_all_reduce")
def replicated_all_reduce(t: Tensor, op: str = "add",
                          group: ReplicaGrouping | None = None) -> Tensor:
    """The sum all-reduce of ``t`` over ``group`` (default all replicas), forward and
    backward."""
    return tp_collectives.replicated_all_reduce_strided(t, check_tp_op(op, ("add",)), group)
