"""Collectives across replicas (``popxl.ops.collectives``) and across tensors of one replica.

Each replica-collective OpDef has a plain ``kernel`` for a program of one replica (every group
then holds one replica) and a ``replicated`` form that exchanges data between the replicas of
each group through the ``ReplicaContext`` (across processes with ``xlgraph.dist``). Gradients are
the exact vector-Jacobian products of the collective over all replicas.

Over 400 lines: each collective's plain kernel, replicated form and gradient are written in
terms of the others (a slice's gradient is a gather, a gather's a slice), so they stay together.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from xlgraph.errors import ShapeError
from xlgraph.op import OpDef, Sample, apply, apply1, normalize_axes, register, same_spec
from xlgraph.ops.replicas import ReplicaContext
from xlgraph.replica_grouping import CommGroup, CommGroupType, ReplicaGrouping
from xlgraph.tensor import Tensor, TensorSpec

__all__ = ["replicated_all_reduce", "replicated_all_reduce_", "replicated_all_gather",
           "replicated_reduce_scatter", "replicated_slice", "replica_sharded_slice",
           "all_reduce", "all_reduce_identical_inputs", "all_reduce_identical_grad_inputs",
           "CollectiveOps", "CommGroup", "CommGroupType"]

CollectiveOps = ("add", "mean", "mul", "min", "max", "and", "or", "square_add")

_REDUCE = {
    "add": lambda s: np.add.reduce(s, 0),
    "mean": lambda s: np.add.reduce(s, 0) / np.asarray(len(s), s.dtype),
    "mul": lambda s: np.multiply.reduce(s, 0),
    "min": lambda s: np.minimum.reduce(s, 0),
    "max": lambda s: np.maximum.reduce(s, 0),
    "and": lambda s: np.logical_and.reduce(s, 0),
    "or": lambda s: np.logical_or.reduce(s, 0),
    "square_add": lambda s: np.add.reduce(s * s, 0),
}


def _check_op(op: str) -> str:
    if op not in CollectiveOps:
        raise ValueError(f"collective op must be one of {CollectiveOps}, got {op!r}")
    return op


def _group_size(group: ReplicaGrouping | None) -> int:
    from xlgraph.context import get_ir

    return group.group_size if group is not None else get_ir().replication_factor


# -- all-reduce ----------------------------------------------------------------------------------
def _all_reduce(x: np.ndarray, op: str, group: Any) -> np.ndarray:
    return np.asarray(_REDUCE[op](x[None]), x.dtype)


def _all_reduce_replicated(ctx: ReplicaContext, x: np.ndarray, op: str, group: Any) -> np.ndarray:
    reduced = ctx.reduce_groups(x, group, _REDUCE[op], f"all-reduce {op}")
    return reduced.astype(x.dtype, copy=False)


def _all_reduce_inplace(x: np.ndarray, op: str, group: Any) -> np.ndarray:
    np.copyto(x, _all_reduce(x, op, group))
    return x


def _all_reduce_inplace_replicated(ctx: ReplicaContext, x: np.ndarray, op: str,
                                   group: Any) -> np.ndarray:
    np.copyto(x, _all_reduce_replicated(ctx, x, op, group))
    return x


def _all_reduce_grad(g: Any, dy: Tensor) -> tuple[Tensor | None]:
    from xlgraph.ops.elementwise import cast, div, equal, mul

    op, group = g.attrs["op"], g.attrs["group"]
    if op in ("and", "or"):
        return (None,)
    if op == "mean":
        return (replicated_all_reduce(dy, "mean", group),)
    if op == "mul":
        return (div(replicated_all_reduce(mul(dy, g.y(0)), "add", group), g.x(0)),)
    total = replicated_all_reduce(dy, "add", group)
    if op == "square_add":
        return (mul(total, mul(g.x(0), 2.0)),)
    if op in ("min", "max"):
        return (mul(total, cast(equal(g.x(0), g.y(0)), dy.dtype)),)
    return (total,)


def _reduce_samples(rng: np.random.Generator) -> list[Sample]:
    x = rng.uniform(0.5, 2.0, (3, 4))
    return [Sample((x,), {"op": op}) for op in ("add", "mean", "mul", "max", "square_add")]


_ALL_REDUCE = OpDef("replicated_all_reduce", same_spec, _all_reduce, _all_reduce_grad,
                    samples=_reduce_samples, replicated=_all_reduce_replicated,
                    replica="collective", all_reduce=True)
_ALL_REDUCE_ = OpDef("replicated_all_reduce_", same_spec, _all_reduce_inplace, inplace_of=0,
                     samples=_reduce_samples, replicated=_all_reduce_inplace_replicated,
                     replica="collective", all_reduce=True)


@register(_ALL_REDUCE)
def replicated_all_reduce(t: Tensor, op: str = "add",
                          group: ReplicaGrouping | None = None) -> Tensor:
    """Reduce ``t`` over the replicas of each group (default: all replicas) with ``op``, one of
    ``CollectiveOps``; every member gets the result."""
    return apply1(_ALL_REDUCE, [t], {"op": _check_op(op), "group": group})


@register(_ALL_REDUCE_)
def replicated_all_reduce_(t: Tensor, op: str = "add",
                           group: ReplicaGrouping | None = None) -> Tensor:
    """In-place ``replicated_all_reduce``."""
    return apply1(_ALL_REDUCE_, [t], {"op": _check_op(op), "group": group})


# -- slices by position in the group ----------------------------------------------------------
def _slice_infer(t: TensorSpec, axis: int, group_size: int, group: Any) -> TensorSpec:
    if t.shape[axis] % group_size:
        raise ShapeError(f"axis {axis} of {t} does not split into {group_size} equal slices")
    shape = list(t.shape)
    shape[axis] //= group_size
    if shape[axis] == 1 and group_size == t.shape[axis]:  # one element each: PopXL drops it
        del shape[axis]
    return TensorSpec(tuple(shape), t.dtype)


def _unslice_infer(t: TensorSpec, axis: int, group_size: int, group: Any) -> TensorSpec:
    shape = list(t.shape)
    shape[axis] *= group_size
    return TensorSpec(tuple(shape), t.dtype)


def _take(x: np.ndarray, axis: int, position: int, size: int, drop: bool = True) -> np.ndarray:
    """Block ``position`` of ``size`` along ``axis``; ``drop``: without the axis when the
    blocks are one element each (``replicated_slice``, not the flat shards)."""
    part = np.split(x, size, axis)[position]
    return (part.squeeze(axis) if drop and x.shape[axis] == size else part).copy()


def _slice_replicated(ctx: ReplicaContext, x: np.ndarray, axis: int, group_size: int,
                      group: Any, drop: bool = True) -> np.ndarray:
    return np.stack([_take(x[i], axis, p, n, drop)
                     for i, (p, n) in enumerate(ctx.positions(group))])


def _slice_grad(g: Any, dy: Tensor) -> tuple[Tensor]:
    """PopART's: every member's slice gathered back along ``axis`` (a new one when the slice
    dropped it)."""
    axis, group, x = g.attrs["axis"], g.attrs["group"], g.x(0)
    dropped = dy.rank < x.rank
    return (replicated_all_gather(dy, axis, group, "new_axis" if dropped else "concat"),)


def _unslice_replicated(ctx: ReplicaContext, dy: np.ndarray, axis: int, group_size: int,
                        group: Any) -> np.ndarray:
    out = []
    for i, (p, n) in enumerate(ctx.positions(group)):
        parts = [np.zeros_like(dy[i])] * n
        parts[p] = dy[i]
        out.append(np.concatenate(parts, axis))
    return np.stack(out)


def _slice_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample((rng.normal(size=(4, 3)),), {"axis": 1})]


_SLICE = OpDef(
    "replicated_slice", _slice_infer,
    lambda x, axis, group_size, group: _take(x, axis, 0, group_size), _slice_grad,
    samples=_slice_samples, replicated=_slice_replicated, replica="per_replica",
)
_UNSLICE = OpDef(
    "replicated_unslice", _unslice_infer, lambda x, axis, group_size, group: x.copy(),
    lambda g, dy: (replicated_slice(dy, g.attrs["axis"], g.attrs["group"]),),
    samples=_slice_samples, replicated=_unslice_replicated, replica="per_replica",
)


@register(_SLICE)
def replicated_slice(t: Tensor, axis: int = 0, group: ReplicaGrouping | None = None) -> Tensor:
    """Each replica takes its own equal slice of ``t`` along ``axis``: the ``i``-th member of a
    group of ``n`` keeps slice ``i`` of ``n``; when ``t.shape[axis]`` is ``n`` (slices of one
    element) the axis is dropped, as PopXL. The gradient is ``replicated_all_gather``."""
    axis = normalize_axes(axis, t.rank)[0]
    return apply1(_SLICE, [t], {"axis": axis, "group_size": _group_size(group), "group": group})


@register(_UNSLICE)
def replicated_unslice(t: Tensor, axis: int, group: ReplicaGrouping | None = None) -> Tensor:
    """The gradient of ``replicated_slice``: ``t`` placed at this replica's slice, zeros
    elsewhere."""
    return apply1(_UNSLICE, [t], {"axis": axis, "group_size": _group_size(group), "group": group})


# -- all-gather ---------------------------------------------------------------------------------
def _gather_infer(t: TensorSpec, axis: int, group_size: int, group: Any,
                  new_axis: bool) -> TensorSpec:
    shape = list(t.shape)
    if new_axis:
        shape.insert(axis, group_size)
    else:
        shape[axis] *= group_size
    return TensorSpec(tuple(shape), t.dtype)


def _gather(x: np.ndarray, axis: int, group_size: int, group: Any, new_axis: bool) -> np.ndarray:
    return np.expand_dims(x, axis).copy() if new_axis else x.copy()


def _gather_replicated(ctx: ReplicaContext, x: np.ndarray, axis: int, group_size: int,
                       group: Any, new_axis: bool) -> np.ndarray:
    join = np.stack if new_axis else np.concatenate
    return ctx.per_group(x, group, lambda s: join(list(s), axis)[None], f"all-gather axis {axis}")


def _gather_grad(g: Any, dy: Tensor) -> tuple[Tensor]:
    """PopART's: this member's own slice of ``dy``, not summed over the group (a reduce-scatter
    with its ``Local`` operator)."""
    from xlgraph.ops.movement import reshape

    dx = replicated_slice(dy, g.attrs["axis"], g.attrs["group"])
    return (reshape(dx, g.x(0).shape),)


_ALL_GATHER = OpDef(
    "replicated_all_gather", _gather_infer, _gather, _gather_grad, replicated=_gather_replicated,
    replica="collective",
    samples=lambda rng: [Sample((rng.normal(size=(2, 3)),), {"axis": a, "output_shape": s})
                         for a, s in ((0, "new_axis"), (1, "concat"), (1, "auto"))],
)


@register(_ALL_GATHER)
def replicated_all_gather(t: Tensor, axis: int = 0, group: ReplicaGrouping | None = None,
                          output_shape: str = "auto") -> Tensor:
    """Every member of a group gets the values of all members, in group order: stacked on a
    new ``axis`` (``output_shape`` "new_axis") or joined along ``axis`` ("concat"); the
    shards of a tensor with a meta_shape are joined into that shape ("meta_shape"). "auto",
    as PopXL: "meta_shape" when ``t`` has a meta_shape, otherwise "concat" (a scalar's values
    make a vector either way)."""
    if output_shape not in ("auto", "new_axis", "concat", "meta_shape"):
        raise ValueError(f"output_shape must be 'auto', 'new_axis', 'concat' or 'meta_shape', "
                         f"got {output_shape!r}")
    if output_shape == "meta_shape" or (output_shape == "auto" and t.meta_shape):
        return _gather_shards(t, group)
    new_axis = output_shape == "new_axis" or t.rank == 0
    axis = normalize_axes(axis, t.rank + new_axis)[0]
    attrs = {"axis": axis, "group_size": _group_size(group), "group": group, "new_axis": new_axis}
    return apply1(_ALL_GATHER, [t], attrs)


def _gather_shards(t: Tensor, group: ReplicaGrouping | None) -> Tensor:
    """The whole tensor (of shape ``t.meta_shape``) from every member's 1-D shard."""
    from xlgraph.ops.movement import reshape

    if not t.meta_shape or t.rank != 1:
        raise ShapeError(f"output_shape='meta_shape' needs a 1-D shard with a meta_shape, got "
                         f"{t.id} {t.spec}")
    full = replicated_all_gather(t, 0, group, "concat")
    return reshape(full[: math.prod(t.meta_shape)], t.meta_shape)


# -- reduce-scatter and sharding ------------------------------------------------------------------
def _shard_infer(t: TensorSpec, group_size: int, group: Any, op: str | None = None,
                 sharded: bool = True) -> TensorSpec:
    meta = t.shape if sharded else ()
    return TensorSpec((math.ceil(math.prod(t.shape) / group_size),), t.dtype, meta)


def _padded(x: np.ndarray, group_size: int) -> np.ndarray:
    flat = x.reshape(-1)
    pad = -flat.size % group_size
    return np.concatenate([flat, np.zeros(pad, x.dtype)]) if pad else flat.copy()


def _scatter_replicated(ctx: ReplicaContext, x: np.ndarray, group_size: int, group: Any,
                        op: str, sharded: bool) -> np.ndarray:
    flat = np.stack([_padded(xi, group_size) for xi in x])
    reduced = ctx.reduce_groups(flat, group, _REDUCE[op], f"reduce-scatter {op}").astype(x.dtype)
    return _slice_replicated(ctx, reduced, 0, group_size, group, drop=False)


def _shard_replicated(ctx: ReplicaContext, x: np.ndarray, group_size: int,
                      group: Any) -> np.ndarray:
    flat = np.stack([_padded(xi, group_size) for xi in x])
    return _slice_replicated(ctx, flat, 0, group_size, group, drop=False)


def _unshard_grad(g: Any, dy: Tensor, reduce: bool) -> Tensor:
    """The full-size gradient of a sharding op: every shard gathered (or this one's placed)."""
    from xlgraph.ops.movement import reshape

    group, x = g.attrs["group"], g.x(0)
    if reduce:
        full = replicated_all_gather(dy, 0, group, "concat")
    else:
        full = replicated_unslice(dy, 0, group)
    return reshape(full[: x.nelms], x.shape)


def _scatter_grad(g: Any, dy: Tensor) -> tuple[Tensor | None]:
    from xlgraph.ops.elementwise import div

    op = g.attrs["op"]
    if op not in ("add", "mean"):
        return (None,)
    dx = _unshard_grad(g, dy, reduce=True)
    return (div(dx, float(g.attrs["group_size"])) if op == "mean" else dx,)


_REDUCE_SCATTER = OpDef(
    "replicated_reduce_scatter", _shard_infer,
    lambda x, group_size, group, op, sharded: _padded(x, group_size), _scatter_grad,
    replicated=_scatter_replicated, replica="per_replica",
    samples=lambda rng: [Sample((rng.normal(size=(2, 3)),), {"op": op})
                         for op in ("add", "mean")],
)
_SHARD = OpDef(
    "replica_sharded_slice", _shard_infer, lambda x, group_size, group: _padded(x, group_size),
    lambda g, dy: (_unshard_grad(g, dy, reduce=False),), replicated=_shard_replicated,
    replica="per_replica",
    samples=lambda rng: [Sample((rng.normal(size=(2, 3)),))],
)


@register(_REDUCE_SCATTER)
def replicated_reduce_scatter(t: Tensor, op: str = "add", group: ReplicaGrouping | None = None,
                              configure_output_for_replicated_tensor_sharding: bool = False
                              ) -> Tensor:
    """Reduce ``t`` over each group, flattened and zero-padded to a multiple of the group size;
    the ``i``-th member keeps the ``i``-th equal shard (1-D). With
    ``configure_output_for_replicated_tensor_sharding`` the shard's ``meta_shape`` is ``t``'s
    shape, as for the shards of a replica-sharded variable."""
    attrs = {"group_size": _group_size(group), "group": group, "op": _check_op(op),
             "sharded": bool(configure_output_for_replicated_tensor_sharding)}
    return apply1(_REDUCE_SCATTER, [t], attrs)


@register(_SHARD)
def replica_sharded_slice(t: Tensor, group: ReplicaGrouping | None = None) -> Tensor:
    """This replica's shard of ``t`` (flattened, zero-padded, split over the group)."""
    return apply1(_SHARD, [t], {"group_size": _group_size(group), "group": group})


# -- within one replica: a reduction over several tensors --------------------------------------
def _list_infer(*specs: TensorSpec, op: str, mode: str) -> tuple[TensorSpec, ...]:
    if len({s.shape for s in specs}) != 1 or len({s.dtype for s in specs}) != 1:
        raise ShapeError(f"all_reduce needs tensors of one spec, got {[str(s) for s in specs]}")
    return specs


def _list_reduce(*xs: np.ndarray, op: str, mode: str) -> tuple[np.ndarray, ...]:
    if mode == "identical_inputs":
        return tuple(x.copy() for x in xs)
    total = np.asarray(_REDUCE[op](np.stack(xs)), xs[0].dtype)
    return tuple(total.copy() for _ in xs)


def _list_grad(g: Any, *dys: Tensor | None) -> tuple[Tensor | None, ...]:
    mode = g.attrs["mode"]
    if g.attrs["op"] != "add" or any(d is None for d in dys):
        raise ValueError("all_reduce: gradients need op='add' and a gradient for every output")
    if mode == "identical_grad_inputs":
        return dys
    return tuple(apply(_ALL_REDUCE_LIST, list(dys), {"op": "add", "mode": "all"}))


_ALL_REDUCE_LIST = OpDef(
    "all_reduce", _list_infer, _list_reduce, _list_grad,
    replicated=lambda ctx, *xs, **attrs: _list_reduce(*np.broadcast_arrays(*xs), **attrs),
    samples=lambda rng: [Sample(([rng.normal(size=(2, 3)), rng.normal(size=(2, 3))],))],
)


def _list_all_reduce(ts: list[Tensor], op: str, mode: str) -> list[Tensor]:
    return list(apply(_ALL_REDUCE_LIST, list(ts), {"op": _check_op(op), "mode": mode}))


@register(_ALL_REDUCE_LIST)
def all_reduce(ts: list[Tensor], ipus: list[int] | None = None, op: str = "add") -> list[Tensor]:
    """Reduce tensors held on several IPUs of one replica; every output is the reduction. The
    gradient of each input is the all-reduce of the output gradients."""
    return _list_all_reduce(ts, op, "all")


def all_reduce_identical_inputs(ts: list[Tensor], ipus: list[int] | None = None,
                                op: str = "add") -> list[Tensor]:
    """For inputs known to be identical: the forward pass is an identity, the backward pass
    all-reduces the gradients."""
    return _list_all_reduce(ts, op, "identical_inputs")


def all_reduce_identical_grad_inputs(ts: list[Tensor], ipus: list[int] | None = None,
                                     op: str = "add") -> list[Tensor]:
    """For outputs whose gradients are identical: the forward pass all-reduces, the backward
    pass is an identity."""
    return _list_all_reduce(ts, op, "identical_grad_inputs")
