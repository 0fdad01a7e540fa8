"""Tensor-parallel collectives of popxl-addons: the all-reduce pair whose forward or backward
pass is an identity, and all-gather / reduce-scatter / all-reduce over strided groups.

Groups are ``ReplicaGrouping``s (``ir.replica_grouping(stride, group_size)``): replica ``r``
belongs to ``{floor(r/(s G)) s G + (r mod s) + k s : k < G}`` and has rank
``(r mod s G) div s``; None means every replica. ``identical_inputs`` marks a value that every
member already holds (forward identity, backward sum all-reduce), ``identical_grad_inputs`` the
reverse (forward sum all-reduce, backward identity): the gradient of each is the other. The plain
all-reduce, all-gather and reduce-scatter are ``ops.collectives``' records.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xlgraph.cost import per_output
from xlgraph.op import OpDef, Sample, apply1, explained, register, same_spec
from xlgraph.ops import collectives
from xlgraph.ops.collectives import _all_reduce, _all_reduce_replicated
from xlgraph.ops.replicas import unchanged
from xlgraph.replica_grouping import ReplicaGrouping
from xlgraph.tensor import Tensor

__all__ = ["replicated_all_reduce_strided", "replicated_all_reduce_strided_identical_inputs",
           "replicated_all_reduce_strided_identical_grad_inputs", "replicated_all_gather_strided",
           "replicated_reduce_scatter_strided", "TP_OPS", "check_tp_op"]

TP_OPS = ("add", "mean")


def check_tp_op(op: str, allowed: tuple[str, ...] = TP_OPS) -> str:
    """``op`` if the tensor-parallel collectives support it, else a ValueError naming them."""
    if op not in allowed:
        raise ValueError(f"op must be one of {allowed}, got {op!r}")
    return op


def _copy(x: np.ndarray, op: str, group: Any) -> np.ndarray:
    return np.array(x, copy=True)


def _identity_grad(g: Any, dy: Tensor) -> tuple[Tensor]:
    return (replicated_all_reduce_strided_identical_grad_inputs(dy, g.attrs["op"],
                                                                g.attrs["group"]),)


def _reduce_grad(g: Any, dy: Tensor) -> tuple[Tensor]:
    return (replicated_all_reduce_strided_identical_inputs(dy, g.attrs["op"], g.attrs["group"]),)


def _samples(rng: np.random.Generator) -> list[Sample]:
    x = rng.uniform(-2.0, 2.0, (3, 4))
    return [Sample((x,), {"op": op}) for op in TP_OPS]


_IDENTICAL_INPUTS = OpDef(
    "replicated_all_reduce_identical_inputs", same_spec, _copy, _identity_grad,
    samples=_samples, replicated=unchanged(_copy), cost=per_output(0))
_IDENTICAL_GRAD_INPUTS = OpDef(
    "replicated_all_reduce_identical_grad_inputs", same_spec, _all_reduce, _reduce_grad,
    samples=_samples, replicated=_all_reduce_replicated, replica="collective",
    cost=per_output(1))


@register(_IDENTICAL_INPUTS)
def replicated_all_reduce_strided_identical_inputs(
        t: Tensor, op: str = "add", group: ReplicaGrouping | None = None) -> Tensor:
    """For a value every member of ``group`` (default: all replicas) holds alike: a copy
    forward; the gradient is the sum (or mean) all-reduce of the members' gradients (opens a
    tensor-parallel block)."""
    return apply1(_IDENTICAL_INPUTS, [t], {"op": check_tp_op(op), "group": group})


@register(_IDENTICAL_GRAD_INPUTS)
def replicated_all_reduce_strided_identical_grad_inputs(
        t: Tensor, op: str = "add", group: ReplicaGrouping | None = None) -> Tensor:
    """The sum (or mean) all-reduce over ``group`` forward; the gradient passes through
    unchanged, every member's being alike (closes a tensor-parallel block)."""
    return apply1(_IDENTICAL_GRAD_INPUTS, [t], {"op": check_tp_op(op), "group": group})


@explained("replicated_all_reduce_strided")
def replicated_all_reduce_strided(t: Tensor, op: str = "add",
                                  group: ReplicaGrouping | None = None) -> Tensor:
    """The sum (or mean) of ``t`` over the members of ``group`` (default: all replicas), both
    ways: the gradient is the same all-reduce."""
    return collectives.replicated_all_reduce(t, check_tp_op(op), group)


@explained("replicated_all_gather_strided")
def replicated_all_gather_strided(t: Tensor, group: ReplicaGrouping | None = None) -> Tensor:
    """The flattened ``t`` of every member of ``group``, joined by rank (1-D, ``G * nelms``);
    a replica-sharded ``t`` (with a ``meta_shape``) comes back whole, in its meta-shape."""
    if t.meta_shape:
        return collectives.replicated_all_gather(t, 0, group, "meta_shape")
    return collectives.replicated_all_gather(t.reshape((t.nelms,)), 0, group, "concat")


@explained("replicated_reduce_scatter_strided")
def replicated_reduce_scatter_strided(
        t: Tensor, op: str = "add", group: ReplicaGrouping | None = None,
        configure_output_for_replicated_tensor_sharding: bool = False) -> Tensor:
    """``t`` flattened, zero-padded to a multiple of the group size and reduced (sum or mean)
    over ``group``; the member of rank ``k`` keeps chunk ``k`` (1-D)."""
    return collectives.replicated_reduce_scatter(
        t, check_tp_op(op), group, configure_output_for_replicated_tensor_sharding)
