"""Cross-entropy over logits whose classes are split into shards: across the replicas of a
tensor-parallel group (``cross_entropy_sharded_loss``) or across tensors of one replica
(``cross_entropy_sharded_wr_loss``), as popxl-addons' native ops compute it.

Per sample ``i`` and class ``j`` of a shard: ``M_i`` is the maximum over every shard,
``D_i = sum over every shard of exp(z_ij - M_i)`` (accumulated in the logits' dtype) and
``L_ij = -(z_ij - M_i - log D_i)``; a shard whose class range holds the label ``t_i`` contributes
``L_{i, t_i}`` to the loss, the others 0. The gradient needs no communication:
``dz_ij = g_i exp(-L_ij) - g_i [j = t_i]`` with the loss gradient ``g`` alike on every shard.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from xlgraph.cost import per_output
from xlgraph.errors import DTypeError, ShapeError
from xlgraph.op import OpDef, Sample, apply, apply1, explained, register
from xlgraph.ops.replicas import ReplicaContext, unchanged
from xlgraph.replica_grouping import ReplicaGrouping
from xlgraph.tensor import Tensor, TensorSpec

__all__ = ["cross_entropy_sharded", "cross_entropy_sharded_grad", "cross_entropy_sharded_loss",
           "cross_entropy_sharded_wr", "cross_entropy_sharded_wr_loss", "sharded_nll"]

_FLOPS = 8  # max, subtract, exp, sum, log, negate, pick, gradient


def sharded_nll(shards: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``-log_softmax`` of logits split by class into ``shards`` (each ``(n, c_s)``), in their
    dtype, one result per shard."""
    dtype = shards[0].dtype
    m = np.max(np.stack([s.max(axis=-1) for s in shards]), axis=0)[:, None]
    total = np.zeros(m.shape, dtype)
    for s in shards:
        total += np.sum(np.exp(s - m), axis=-1, keepdims=True, dtype=dtype)
    log_d = np.log(total)
    return [np.asarray(-(s - m - log_d), dtype) for s in shards]


def _pick(nll: np.ndarray, labels: np.ndarray, offset: int = 0) -> np.ndarray:
    """``nll[i, labels_i - offset]`` where that column is on this shard, else 0."""
    local = np.asarray(labels).astype(np.int64) - offset
    inside = (local >= 0) & (local < nll.shape[-1])
    rows = np.arange(len(local))
    return np.where(inside, nll[rows, np.where(inside, local, 0)], 0).astype(nll.dtype)


def _onehot(like: np.ndarray, labels: np.ndarray, offset: int = 0) -> np.ndarray:
    local = np.asarray(labels).astype(np.int64)[..., None] - offset
    return (np.arange(like.shape[-1]) == local).astype(like.dtype)


def _check(logits: TensorSpec, labels: TensorSpec, what: str = "") -> None:
    if len(logits.shape) != 2 or len(labels.shape) != 1:
        raise ShapeError(f"{what}logits must be rank 2 (samples, classes) and indices rank 1, got "
                         f"logits {logits} and indices {labels}")
    if logits.shape[0] != labels.shape[0]:
        raise ShapeError(f"{what}logits {logits} and indices {labels} hold different sample "
                         f"counts")
    if not logits.dtype.is_floating_point or labels.dtype.is_floating_point:
        raise DTypeError(f"{what}logits must be floating point and indices integer, got "
                         f"{logits.dtype} and {labels.dtype}")


# -- across the replicas of a group ------------------------------------------------------------
def _infer(logits: TensorSpec, labels: TensorSpec, group: Any) -> tuple[TensorSpec, ...]:
    _check(logits, labels)
    return TensorSpec(logits.shape[:1], logits.dtype), logits


def _kernel(z: np.ndarray, labels: np.ndarray, group: Any) -> tuple[np.ndarray, np.ndarray]:
    (nll,) = sharded_nll([z])
    return _pick(nll, labels), nll


def _replicated(ctx: ReplicaContext, z: np.ndarray, labels: np.ndarray,
                group: Any) -> tuple[np.ndarray, np.ndarray]:
    nll = ctx.per_group(z, group, lambda members: np.stack(sharded_nll(list(members))),
                        "sharded cross-entropy")
    picked = np.stack([_pick(n, t) for n, t in zip(nll, labels)])
    loss = ctx.reduce_groups(picked, group, lambda s: np.add.reduce(s, 0),
                             "sharded cross-entropy loss").astype(z.dtype, copy=False)
    return loss, np.asarray(nll)


def _grad_kernel(g: np.ndarray, nll: np.ndarray, labels: np.ndarray,
                 offset: int = 0) -> np.ndarray:
    """Any leading axes (the replica axis too)."""
    g = g[..., None]
    return (g * np.exp(-nll) - g * _onehot(nll, labels, offset)).astype(nll.dtype)


def _nll_grad(dnll: Tensor | None, nll: Tensor, total: Tensor) -> Tensor:
    """What a gradient ``dnll`` of the ``-log_softmax`` output adds to the logits' gradient:
    ``softmax * total - dnll``, where ``total`` sums ``dnll`` over every shard's classes."""
    from xlgraph.ops.elementwise import exp, mul, sub

    softmax_total = mul(exp(-nll), total)
    return softmax_total if dnll is None else sub(softmax_total, dnll)


def _grad(g: Any, dloss: Tensor | None, dnll: Tensor | None) -> tuple[Tensor | None, None]:
    from xlgraph.ops.collectives import replicated_all_reduce
    from xlgraph.ops.reduce import sum as reduce_sum

    nll, labels = g.y(1), g.x(1)
    dz = None if dloss is None else cross_entropy_sharded_grad(dloss, nll, labels)
    if dnll is not None:
        total = replicated_all_reduce(reduce_sum(dnll, 1, keepdims=True), "add",
                                      g.attrs["group"])
        extra = _nll_grad(dnll, nll, total)
        dz = extra if dz is None else dz + extra
    return dz, None


def _samples(rng: np.random.Generator) -> list[Sample]:
    z = rng.normal(0.0, 2.0, (6, 5))
    # -1, 5 and 7 are on other shards: with one replica (one shard) the loss gradient is then
    # that of the whole group's loss, not of this shard's 0 (checked over replicas instead)
    outside = Sample((z, np.array([0, 4, -1, 5, 2, 7])), grad=False)
    return [outside, Sample((z, np.array([0, 4, 1, 3, 2, 2]))),
            Sample((rng.normal(size=(3, 1)), np.array([0, 0, 0])))]


_SHARDED = OpDef("cross_entropy_sharded", _infer, _kernel, _grad, samples=_samples,
                 replicated=_replicated, replica="per_replica", cost=per_output(_FLOPS))


def _grad_infer(g: TensorSpec, nll: TensorSpec, labels: TensorSpec, offset: int = 0
                ) -> TensorSpec:
    _check(nll, labels)
    if g.shape != labels.shape:
        raise ShapeError(f"the loss gradient {g} needs one value per sample of {nll}")
    return nll


def _grad_samples(rng: np.random.Generator) -> list[Sample]:
    nll = -np.log(rng.dirichlet(np.ones(5), 4))
    return [Sample((rng.normal(size=4), nll, np.array([1, -2, 4, 9])))]


_SHARDED_GRAD = OpDef("cross_entropy_sharded_grad", _grad_infer, _grad_kernel,
                      samples=_grad_samples, replicated=unchanged(_grad_kernel),
                      cost=per_output(4))


@register(_SHARDED)
def cross_entropy_sharded(logits: Tensor, indices: Tensor,
                          group: ReplicaGrouping | None = None) -> tuple[Tensor, Tensor]:
    """popxl-addons' native sharded cross-entropy: ``(loss, -log_softmax)``, the per-sample
    loss ``(n,)`` alike on every member of ``group`` (default: all replicas), each member
    holding a slice ``(n, c_local)`` of the classes and ``indices`` relative to its slice."""
    return apply(_SHARDED, [logits, indices], {"group": group})


@register(_SHARDED_GRAD)
def cross_entropy_sharded_grad(dloss: Tensor, nll: Tensor, indices: Tensor,
                               offset: int = 0) -> Tensor:
    """``dloss * exp(-nll) - dloss * onehot(indices - offset)``: the local logits gradient of
    the sharded cross-entropy (no communication)."""
    return apply1(_SHARDED_GRAD, [dloss, nll, indices], {"offset": int(offset)})


@explained("cross_entropy_sharded_loss")
def cross_entropy_sharded_loss(logits: Tensor, indices: Tensor, ignore_index: int | None = None,
                               replica_grouping: ReplicaGrouping | None = None,
                               reduction: str = "mean",
                               available_memory_proportion: float = 0.4) -> Tensor:
    """Cross-entropy of logits split by class over the members of ``replica_grouping``
    (default: all replicas): every member holds ``(n, c_local)`` logits and the same ``(n,)``
    ``indices``, shifted so that ``0 <= index < c_local`` names a class on this member; the
    loss is alike on every member.

    ``ignore_index`` masks samples out of loss and gradient; ``reduction`` is ``"mean"`` (over
    the samples not ignored), ``"sum"`` or ``"none"``. ``available_memory_proportion`` is a
    planning hint.
    """
    from xlgraph.ops.elementwise import cast, div, mul
    from xlgraph.ops.pointwise import not_equal
    from xlgraph.ops.reduce import mean
    from xlgraph.ops.reduce import sum as reduce_sum

    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"cross_entropy_sharded_loss: reduction must be 'mean', 'sum' or "
                         f"'none', got {reduction!r}")
    loss, _ = apply(_SHARDED, [logits, indices], {"group": replica_grouping},
                    hints={"available_memory_proportion": available_memory_proportion})
    mask = None
    if ignore_index is not None:
        mask = cast(not_equal(indices, ignore_index), loss.dtype)
        loss = mul(loss, mask)
    if reduction == "mean":
        return mean(loss) if mask is None else div(reduce_sum(loss), reduce_sum(mask))
    return reduce_sum(loss) if reduction == "sum" else loss


# -- across tensors of one replica ----------------------------------------------------------------
def _wr_infer(*specs: TensorSpec, widths: tuple[int, ...]) -> tuple[TensorSpec, ...]:
    shards, labels = specs[: len(widths)], specs[len(widths):]
    for k, (z, t) in enumerate(zip(shards, labels)):
        _check(z, t, f"shard {k}: ")
    if len({z.dtype for z in shards}) != 1 or len({z.shape[0] for z in shards}) != 1:
        raise ShapeError(f"the logits shards must share dtype and sample count, got "
                         f"{[str(z) for z in shards]}")
    if len({t.dtype for t in labels}) != 1:
        raise DTypeError(f"the indices must share one dtype, got {[str(t) for t in labels]}")
    return (TensorSpec(shards[0].shape[:1], shards[0].dtype), *shards)


def _offsets(widths: Sequence[int]) -> list[int]:
    return [int(o) for o in np.cumsum([0, *widths[:-1]])]


def _wr_kernel(*arrays: np.ndarray, widths: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    shards, labels = arrays[: len(widths)], arrays[len(widths):]
    nlls = sharded_nll(list(shards))
    picked = [_pick(n, t, o) for n, t, o in zip(nlls, labels, _offsets(widths))]
    return (np.asarray(np.add.reduce(picked), shards[0].dtype), *nlls)


def _wr_grad(g: Any, dloss: Tensor | None, *dnlls: Tensor | None) -> tuple[Tensor | None, ...]:
    from xlgraph.ops.reduce import sum as reduce_sum

    widths = g.attrs["widths"]
    nlls = [g.y(1 + k) for k in range(len(widths))]
    given = [reduce_sum(d, 1, keepdims=True) for d in dnlls if d is not None]
    total = given[0] if given else None
    for t in given[1:]:
        total = total + t
    out: list[Tensor | None] = []
    for k, offset in enumerate(_offsets(widths)):
        dz = (None if dloss is None
              else cross_entropy_sharded_grad(dloss, nlls[k], g.x(len(widths) + k), offset))
        if total is not None:
            extra = _nll_grad(dnlls[k], nlls[k], total)
            dz = extra if dz is None else dz + extra
        out.append(dz)
    return (*out, *([None] * len(widths)))


def _wr_samples(rng: np.random.Generator) -> list[Sample]:
    labels = np.array([0, 3, 5, 8, 2])
    shards = [rng.normal(0.0, 2.0, (5, c)) for c in (3, 2, 4)]
    return [Sample((shards, [labels] * 3))]


_SHARDED_WR = OpDef("cross_entropy_sharded_wr", _wr_infer, _wr_kernel, _wr_grad,
                    samples=_wr_samples, cost=per_output(_FLOPS))


@register(_SHARDED_WR)
def cross_entropy_sharded_wr(logits: list[Tensor], indices: list[Tensor]) -> tuple[Tensor, ...]:
    """popxl-addons' native within-replica sharded cross-entropy: ``(loss, *nll)``, the
    per-sample loss and each shard's ``-log_softmax``; ``indices`` are global class ids."""
    return _apply_wr(logits, indices, None)


def _apply_wr(logits: list[Tensor], indices: list[Tensor],
              ipu: int | None) -> tuple[Tensor, ...]:
    if len(logits) != len(indices) or not logits:
        raise ValueError(f"give one indices tensor per logits shard, got {len(logits)} logits "
                         f"and {len(indices)} indices")
    widths = tuple(int(z.shape[-1]) if z.rank else 0 for z in logits)
    return apply(_SHARDED_WR, [*logits, *indices], {"widths": widths}, hints={"ipu": ipu})


@explained("cross_entropy_sharded_wr_loss")
def cross_entropy_sharded_wr_loss(logits: list[Tensor], indices: list[Tensor],
                                  ipus: list[int] | None = None) -> Tensor:
    """The per-sample cross-entropy ``(n,)`` of logits split by class into ``logits`` (one
    ``(n, c_s)`` tensor per IPU of this replica, in class order) against global class
    ``indices`` (one copy per shard); unreduced, no ignore index. ``ipus`` (default: where
    the shards are) must match the shards' placement; the loss is on the first."""
    if ipus is None:
        ipus = [z.ipu for z in logits]
    if len(ipus) != len(logits):
        raise ValueError(f"cross_entropy_sharded_wr_loss: {len(ipus)} ipus for "
                         f"{len(logits)} logits shards")
    for k, (z, t) in enumerate(zip(logits, indices)):
        placed = [x for x in (z, t) if x.producer is not None and "ipu" in x.producer.hints]
        if any(x.ipu != ipus[k] for x in placed):
            raise ValueError(f"cross_entropy_sharded_wr_loss: shard {k} ({z.id}, {t.id}) is on "
                             f"IPU {[x.ipu for x in placed]}, not on ipus[{k}] = {ipus[k]}")
    return _apply_wr(list(logits), list(indices), int(ipus[0]))[0]
