"""Power-of-two scales for casting to fp8 (popxl-addons' ``fp8_amax_scale`` and
``fp8_mse_scale``): an int32 scalar ``s`` in ``[-31, 31]`` meant for ``cast_fp8(x * 2^s)``.

``fp8_amax_scale``: ``floor(log2(max_fp8 / max|x|))``. ``fp8_mse_scale`` picks the scale whose
fp8 range minimises the squared error of a histogram of ``|x|`` over the levels ``2^(k-126)``:
underflow, in-range quantisation and clipping terms; the middle of a plateau of minima.
"""

from __future__ import annotations

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
    amax = np.max(np.abs(x)) if x.size else x.dtype.type(0)
    with np.errstate(divide="ignore"):
        ratio = np.log2(x.dtype.type(FP8_FORMATS[fmt].max) / amax)
    return np.asarray(np.clip(np.floor(ratio), -31, 31), np.int32)


def _amax_ref(x: np.ndarray, fmt: str) -> np.ndarray:
    amax = float(np.max(np.abs(x.astype(np.float64))))
    return np.asarray(min(31, max(-31, int(np.floor(np.log2(FP8_FORMATS[fmt].max / amax))))),
                      np.int32)


def mse_costs(x: np.ndarray, fmt: str) -> np.ndarray:
    """The 62 candidates' costs (float64) from the histogram of ``|x|`` (levels in ``x``'s
    dtype: float16 collapses most of them)."""
    f = FP8_FORMATS[fmt]
    with np.errstate(over="ignore"):  # float16: the levels past 65504 become inf
        levels = _LEVELS.astype(x.dtype)
    bins = np.searchsorted(levels, np.abs(x).ravel(), side="right") - 1  # -1: below E_0
    h = np.bincount(bins[bins >= 0], minlength=254) / max(x.size, 1)
    e = _LEVELS
    m = f.min_exp - 31 + 126
    span = f.max_exp - f.min_exp + 1
    q = 2.0 ** (-2 * (10 - f.mantissa_bits))
    costs = np.empty(62)
    for c in range(62):
        lo, hi = m + c, m + c + span
        costs[c] = (np.sum(h[1:lo] * e[1:lo] ** 2) + q * np.sum(h[lo:hi] * e[lo:hi] ** 2)
                    + np.sum(h[hi:] * (e[hi - 1] - e[hi:]) ** 2))
    return costs


def _mse(x: np.ndarray, fmt: str) -> np.ndarray:
    costs = mse_costs(x, fmt)
    first = int(np.argmin(costs))
    ties = int(np.sum(costs == costs[first]))
    return np.asarray(31 - (first + ties // 2), np.int32)


def _samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample((rng.normal(0.0, 3.0, (4, 5)),)),
            Sample((rng.normal(0.0, 1e-3, (6,)),), {"dtype": dtypes.float8_152}),
            Sample((rng.normal(0.0, 1e4, (3, 3)),))]


_AMAX = OpDef("fp8_amax_scale", _infer, _amax, ref=_amax_ref, samples=_samples,
              cost=per_input(2))
_MSE = OpDef("fp8_mse_scale", _infer, _mse, samples=_samples, cost=per_input(4))


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
