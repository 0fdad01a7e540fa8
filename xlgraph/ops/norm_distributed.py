"""Layer normalisation over a hidden dimension split across the replicas of a group
(popxl-addons' ``layer_norm_distributed``).

Each member holds ``(N, H_local)`` of ``(N, H)``, ``H = H_local * G``. Per row the partial sums
of ``x`` and ``x^2`` are summed over the group, statistics in float32 (float64 for float64
input): ``mu = sum(x)/H``, ``var = sum(x^2)/H - mu^2``, ``r = 1/sqrt(var + eps)``; then
``y = (x - mu) r w + b`` with the local ``w`` and ``b``. The gradient applies ``w`` to the
incoming gradient (popxl-addons 3.4 leaves it out, which is exact only for ``w = 1``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from xlgraph import dtypes
from xlgraph.cost import per_output
from xlgraph.errors import DTypeError, ShapeError
from xlgraph.op import OpDef, Sample, apply, register
from xlgraph.ops.replicas import ReplicaContext
from xlgraph.replica_grouping import ReplicaGrouping
from xlgraph.tensor import Tensor, TensorSpec

__all__ = ["layer_norm_distributed"]


def _stat_dtype(dtype: Any) -> Any:
    """float32, or float64 for float64 data."""
    return np.float64 if np.dtype(dtype) == np.float64 else np.float32


def _infer(t: TensorSpec, w: TensorSpec, b: TensorSpec, epsilon: float, group: Any,
           stable: bool = False) -> tuple[TensorSpec, ...]:
    if len(t.shape) != 2 or w.shape != t.shape[1:] or b.shape != t.shape[1:]:
        raise ShapeError(f"t must be (N, H_local) with w and b (H_local,), got t {t}, w {w}, "
                         f"b {b}")
    if not t.dtype.is_floating_point or w.dtype != t.dtype or b.dtype != t.dtype:
        raise DTypeError(f"t, w and b must share one floating dtype, got {t.dtype}, {w.dtype}, "
                         f"{b.dtype}")
    stats = dtypes.float64 if t.dtype == dtypes.float64 else dtypes.float32
    return t, TensorSpec(t.shape[:1], stats), TensorSpec(t.shape[:1], stats)


def _moments(x: np.ndarray, group_sum: Callable[[np.ndarray], np.ndarray], hidden: int,
             stable: bool) -> tuple[np.ndarray, np.ndarray]:
    """Each row's mean and biased variance over the group's ``hidden`` units (any leading
    axes): ``sum(x^2)/H - mu^2``, or with ``stable`` the sum of squared deviations from the
    mean (a second exchange)."""
    acc = _stat_dtype(x.dtype)
    xf = x.astype(acc)
    mu = group_sum(np.sum(xf, axis=-1)) / acc(hidden)
    if stable:
        centred = xf - mu[..., None]
        return mu, group_sum(np.sum(centred * centred, axis=-1)) / acc(hidden)
    return mu, group_sum(np.sum(xf * xf, axis=-1)) / acc(hidden) - mu * mu


def _normalise(x: np.ndarray, w: np.ndarray, b: np.ndarray, mu: np.ndarray, var: np.ndarray,
               epsilon: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(y, mu, r)``; ``w`` and ``b`` lined up with ``x``."""
    acc = mu.dtype.type
    r = (1 / np.sqrt(var + acc(epsilon))).astype(mu.dtype)
    y = (x.astype(mu.dtype) - mu[..., None]) * r[..., None] * w.astype(mu.dtype) + b.astype(
        mu.dtype)
    return y.astype(x.dtype), mu, r


def _kernel(x: np.ndarray, w: np.ndarray, b: np.ndarray, epsilon: float, group: Any,
            stable: bool = False) -> Any:
    mu, var = _moments(x, lambda s: s, x.shape[-1], stable)
    return _normalise(x, w, b, mu, var, epsilon)


def _replicated(ctx: ReplicaContext, x: np.ndarray, w: np.ndarray, b: np.ndarray,
                epsilon: float, group: Any, stable: bool = False) -> Any:
    def group_sum(s: np.ndarray) -> np.ndarray:
        return ctx.reduce_groups(s, group, lambda v: np.add.reduce(v, 0),
                                 "layer_norm_distributed statistics")

    hidden = x.shape[-1] * ctx.grouping(group).group_size
    mu, var = _moments(x, group_sum, hidden, stable)
    return _normalise(x, w[:, None, :], b[:, None, :], mu, var, epsilon)


def _grad(g: Any, dy: Tensor | None, dmu: Tensor | None,
          dr: Tensor | None) -> tuple[Tensor | None, ...]:
    from xlgraph.ops.collectives import _group_size, replicated_all_reduce
    from xlgraph.ops.elementwise import cast
    from xlgraph.ops.reduce import sum as reduce_sum

    group = g.attrs["group"]
    x, w = g.x(0), g.x(1)
    mu, r = g.y(1), g.y(2)
    acc = mu.dtype
    n = x.shape[0]
    hidden = float(x.shape[1] * _group_size(group))

    def group_sum(t: Tensor) -> Tensor:
        return replicated_all_reduce(t, "add", group)

    centred = cast(x, acc) - mu.reshape((n, 1))
    xhat = centred * r.reshape((n, 1))
    dx = dw = db = None
    if dy is not None:
        dyf = cast(dy, acc)
        d = dyf * cast(w, acc)
        mean_d = group_sum(reduce_sum(d, 1, keepdims=True)) / hidden
        mean_dx = group_sum(reduce_sum(d * xhat, 1, keepdims=True)) / hidden
        dx = r.reshape((n, 1)) * (d - mean_d - xhat * mean_dx)
        dw = cast(reduce_sum(dyf * xhat, 0), w.dtype)
        db = cast(reduce_sum(dyf, 0), w.dtype)
    if dmu is not None:
        extra = group_sum(dmu).reshape((n, 1)) / hidden + 0 * centred
        dx = extra if dx is None else dx + extra
    if dr is not None:  # r = (var + eps)^-1/2, d var / dx = 2 (x - mu) / H
        dvar = group_sum(dr * r * r * r * -0.5).reshape((n, 1))
        extra = dvar * centred * (2.0 / hidden)
        dx = extra if dx is None else dx + extra
    return (None if dx is None else cast(dx, x.dtype)), dw, db


def _samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample((rng.normal(size=(4, 6)), rng.uniform(0.5, 1.5, 6), rng.normal(size=6))),
            Sample((rng.normal(2.0, 3.0, (3, 5)), rng.uniform(0.5, 1.5, 5), rng.normal(size=5)),
                   {"epsilon": 1e-3})]


_LN_DIST = OpDef("layer_norm_distributed", _infer, _kernel, _grad, samples=_samples,
                 replicated=_replicated, replica="per_replica", cost=per_output(8))


@register(_LN_DIST)
def layer_norm_distributed(t: Tensor, w: Tensor, b: Tensor, epsilon: float = 1e-5,
                           group: ReplicaGrouping | None = None) -> Tensor:
    """Layer normalisation of ``t`` ``(N, H_local)`` over a hidden dimension split across the
    members of ``group`` (default: all replicas), with this member's scale ``w`` and bias
    ``b``. The op also outputs the row means and inverse standard deviations ``(N,)``, alike
    on every member (``op.outputs[1:]``)."""
    from xlgraph.context import get_ir

    stable = bool(get_ir().session_options.enableStableNorm)
    attrs = {"epsilon": float(epsilon), "group": group, "stable": stable}
    return apply(_LN_DIST, [t, w, b], attrs)[0]
