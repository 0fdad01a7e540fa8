"""Power-of-two scales for casting to fp8 (popxl-addons' ``fp8_amax_scale`` and
``fp8_mse_scale``): an int32 scalar ``s`` in ``[-31, 31]`` meant for ``cast_fp8(x * 2^s)``.

``fp8_amax_scale``: ``floor(log2(max_fp8 / max|x|))``. ``fp8_mse_scale`` picks the scale whose
fp8 range minimises the squared error of a histogram of ``|x|`` over the levels ``2^(k-126)``:
underflow, in-range quantisation and clipping terms; the middle of a plateau of minima.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from xlgraph import dtypes
from xlgraph.cost import per_input
from xlgraph.errors import DTypeError
from xlgraph.op import OpDef, Sample, apply1, register
from xlgraph.tensor import Tensor, TensorSpec

__all__ = ["fp8_amax_scale", "fp8_mse_scale", "FP8_FORMATS"]


class Fp8Format(NamedTuple):
    """An fp8 format's largest value, exponent range and mantissa bits."""

    max: float
    min_exp: int
    max_exp: int
    mantissa_bits: int


FP8_FORMATS = {"float8_143": Fp8Format(240.0, -10, 7, 3),
               "float8_152": Fp8Format(57344.0, -17, 15, 2)}
_LEVELS = 2.0 ** (np.arange(254) - 126)  # E_k = 2^(k-126), k = 0..253


def _format(dtype: Any) -> str:
    name = dtypes.as_dtype(dtype).name
    if name not in FP8_FORMATS:
        raise ValueError(f"dtype must be float8_143 or float8_152, got {name}")
    return name


def _infer(src: TensorSpec, fmt: str) -> TensorSpec:
    if src.dtype not in (dtypes.float16, dtypes.float32):
        raise DTypeError(f"src must be float16 or float32, got {src}")
    return TensorSpec((), dtypes.int32)


def _amax(x: np.ndarray, fmt: str) -> np.ndarray:
    return _amax_rows(x.reshape(1, -1), fmt)[0]


def _amax_rows(rows: np.ndarray, fmt: str) -> np.ndarray:
    """The scale of each row of ``rows`` (one replica's elements per row)."""
    amax = np.max(np.abs(rows), axis=1) if rows.shape[1] else np.zeros(len(rows), rows.dtype)
    with np.errstate(divide="ignore"):
        ratio = np.log2(rows.dtype.type(FP8_FORMATS[fmt].max) / amax)
    return np.clip(np.floor(ratio), -31, 31).astype(np.int32)


def _amax_ref(x: np.ndarray, fmt: str) -> np.ndarray:
    amax = float(np.max(np.abs(x.astype(np.float64))))
    return np.asarray(min(31, max(-31, int(np.floor(np.log2(FP8_FORMATS[fmt].max / amax))))),
                      np.int32)


def mse_costs(x: np.ndarray, fmt: str) -> np.ndarray:
    """The 62 candidates' costs (float64) from the histogram of ``|x|`` (levels in ``x``'s
    dtype: float16 collapses most of them)."""
    return _mse_costs_rows(x.reshape(1, -1), fmt)[0]


def _mse_costs_rows(rows: np.ndarray, fmt: str) -> np.ndarray:
    """``mse_costs`` of each row of ``rows``: ``(rows, 62)``. Each term is a correctly rounded
    sum (``math.fsum``) over the occupied levels, so candidates whose windows hold the same
    mass cost exactly the same: a plateau's width does not depend on summation order."""
    f = FP8_FORMATS[fmt]
    with np.errstate(over="ignore"):  # float16: the levels past 65504 become inf
        levels = _LEVELS.astype(rows.dtype)
    n, size = rows.shape
    bins = np.searchsorted(levels, np.abs(rows), side="right") - 1  # -1: below E_0
    m = f.min_exp - 31 + 126
    span = f.max_exp - f.min_exp + 1
    q = 2.0 ** (-2 * (10 - f.mantissa_bits))
    costs = np.empty((n, 62))
    for r in range(n):
        h = np.bincount(bins[r][bins[r] >= 0], minlength=254) / max(size, 1)
        occupied = np.flatnonzero(h)
        occupied = occupied[occupied >= 1].tolist()  # the bucket below E_1 is dropped
        mass = {j: h[j] * _LEVELS[j] ** 2 for j in occupied}
        for c in range(62):
            lo, hi = m + c, m + c + span
            top = _LEVELS[hi - 1]
            costs[r, c] = (math.fsum(mass[j] for j in occupied if j < lo)
                           + q * math.fsum(mass[j] for j in occupied if lo <= j < hi)
                           + math.fsum(h[j] * (top - _LEVELS[j]) ** 2
                                       for j in occupied if j >= hi))
    return costs


def _mse(x: np.ndarray, fmt: str) -> np.ndarray:
    return _mse_rows(x.reshape(1, -1), fmt)[0]


def _mse_rows(rows: np.ndarray, fmt: str) -> np.ndarray:
    costs = _mse_costs_rows(rows, fmt)
    first = np.argmin(costs, axis=1)
    ties = np.sum(costs == costs[np.arange(len(costs)), first][:, None], axis=1)
    return (31 - (first + ties // 2)).astype(np.int32)


def _per_replica(rows_kernel: Any) -> Any:
    """The replicated form: one scale per replica from its own elements, in one call."""
    return lambda ctx, x, **attrs: rows_kernel(x.reshape(x.shape[0], -1), **attrs)


def _samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample((rng.normal(0.0, 3.0, (4, 5)),)),
            Sample((rng.normal(0.0, 1e-3, (6,)),), {"dtype": dtypes.float8_152}),
            Sample((rng.normal(0.0, 1e4, (3, 3)),))]


_AMAX = OpDef("fp8_amax_scale", _infer, _amax, ref=_amax_ref, samples=_samples,
              cost=per_input(2), replicated=_per_replica(_amax_rows))
_MSE = OpDef("fp8_mse_scale", _infer, _mse, samples=_samples, cost=per_input(4),
             replicated=_per_replica(_mse_rows))


def _check(src: Tensor, name: str) -> None:
    if src.dtype not in (dtypes.float16, dtypes.float32):
        raise RuntimeError(f"{name}: src must be float16 or float32, got {src.id} {src.spec}")


@register(_AMAX)
def fp8_amax_scale(src: Tensor, dtype: dtypes.dtype = dtypes.float8_143) -> Tensor:
    """The int32 scale ``clip(floor(log2(max_fp8 / max|src|)), -31, 31)`` for casting ``src``
    (float16 or float32) to ``dtype`` as ``cast(src * 2^scale)``; no gradient."""
    _check(src, "fp8_amax_scale")
    return apply1(_AMAX, [src], {"fmt": _format(dtype)})


@register(_MSE)
def fp8_mse_scale(src: Tensor, dtype: dtypes.dtype = dtypes.float8_143) -> Tensor:
    """The int32 scale for casting ``src`` (float16 or float32) to ``dtype`` that minimises
    the squared error estimated from a histogram of ``|src|`` over powers of two; no
    gradient. Meaningful for float32 (float16's levels collapse, as in popxl-addons)."""
    _check(src, "fp8_mse_scale")
    return apply1(_MSE, [src], {"fmt": _format(dtype)})
