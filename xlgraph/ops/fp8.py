"""fp8 ops with power-of-two scales: casts to and from ``float8_143``/``float8_152``, and the
matmul and convolution of fp8 operands (results in float16).

A ``log2_scale`` is an int32 scalar tensor ``s`` read at run time; the scale is ``2**s`` and
``s`` must lie in [-32, 32) (else the run fails, as PopART's
``throwIfLog2ScaleTensorNotInRange`` does by default; with the option off, it is clamped).
The fp8 formats come from ``ml_dtypes`` (the ``fp8`` extra); see ``xlgraph.fp8_utils`` for the
format details. None of these ops has a gradient, as in PopXL.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np

from xlgraph import dtypes
from xlgraph.errors import DTypeError, user_source_line
from xlgraph.fp8_utils import host_pow2scale_cast_to_fp8
from xlgraph.op import OpDef, Sample, apply1, register
from xlgraph.ops.conv import (
    _conv,
    _conv_attrs,
    _conv_infer,
    _conv_transpose,
    _conv_transpose_infer,
    _transpose_attrs,
    macs,
    planning_hints,
)
from xlgraph.ops.linalg import _matmul_infer, matmul_cost
from xlgraph.ops.window import checked
from xlgraph.tensor import Tensor, TensorSpec, constant

__all__ = ["pow2scale_cast_to_fp8", "pow2scale_cast_from_fp8", "matmul_pow2scaled",
           "conv_pow2scaled", "conv_transpose_pow2scaled"]

_FP8 = (dtypes.float8_143, dtypes.float8_152)


def _scale(log2_scale: np.ndarray, in_range: bool = True) -> int:
    """The scale's exponent; outside [-32, 32) the run fails (``in_range``, PopART's default
    ``throwIfLog2ScaleTensorNotInRange``) or takes the nearest end of the range."""
    s = int(np.asarray(log2_scale).reshape(()))
    if not -32 <= s < 32:
        if in_range:
            raise ValueError(f"log2_scale {s} is outside [-32, 32)")
        s = min(max(s, -32), 31)
    return s


def follow_scale_option(ir: Any) -> None:
    """Make the Ir's pow2-scaled ops follow its ``throwIfLog2ScaleTensorNotInRange`` option
    (read as a Session is built, as PopART reads it)."""
    check = bool(ir.session_options.throwIfLog2ScaleTensorNotInRange)
    for graph in ir.graphs:
        for op in graph.ops:
            if op.defn.name in __all__:
                op.attrs["in_range"] = check


def _check_scale(spec: TensorSpec) -> None:
    """PopXL's checks and messages: a scalar (``ValueError``), then int32 (``TypeError``)."""
    if spec.shape != ():
        raise ValueError(f"Log2 scale argument must be a scalar tensor, got {spec}")
    if spec.dtype is not dtypes.int32:
        raise DTypeError(f"Log2 scale tensor must be of type popxl.int32, got {spec}")


def _check_fp8(*specs: TensorSpec) -> None:
    for s in specs:
        if s.dtype not in _FP8:
            raise DTypeError(f"expected float8_143 or float8_152 data, got {s}")


def _log2_scale_tensor(log2_scale: Tensor | int | None, *fp8: Tensor) -> Tensor:
    """The scale as a tensor, after PopXL's checks in its order (their messages first): the
    ``fp8`` operands, then the scale's rank and dtype."""
    if not isinstance(log2_scale, Tensor):
        return constant(np.int32(log2_scale or 0), dtypes.int32, "log2_scale")
    try:
        _check_fp8(*(t.spec for t in fp8))
        _check_scale(log2_scale.spec)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{exc} [at {user_source_line()}]") from None
    return log2_scale


def _fp8_samples(make: Any) -> Any:
    """Samples that need ml_dtypes; none when the extra is missing."""
    def samples(rng: np.random.Generator) -> list[Sample]:
        if importlib.util.find_spec("ml_dtypes") is None:
            return []
        return make(rng)

    return samples


def _to_fp8_values(rng: np.random.Generator, shape: tuple[int, ...], dt: dtypes.dtype,
                   spread: float = 4.0) -> np.ndarray:
    return (rng.normal(size=shape) * spread).astype(dt.as_numpy())


# -- casts -------------------------------------------------------------------------------------
def _to_fp8_infer(x: TensorSpec, log2_scale: TensorSpec, dtype: dtypes.dtype,
                  nan_on_overflow: bool, in_range: bool = True) -> TensorSpec:
    _check_scale(log2_scale)
    if not x.dtype.is_floating_point or x.dtype in _FP8:
        raise DTypeError(f"pow2scale_cast_to_fp8 needs float16/float32 data, got {x}")
    return TensorSpec(x.shape, dtype)


def _to_fp8(x: np.ndarray, log2_scale: np.ndarray, dtype: dtypes.dtype,
            nan_on_overflow: bool, in_range: bool = True) -> np.ndarray:
    return host_pow2scale_cast_to_fp8(x, dtype, _scale(log2_scale, in_range), nan_on_overflow)


def _nearest_fp8_ref(x: np.ndarray, log2_scale: np.ndarray, dtype: dtypes.dtype,
                     nan_on_overflow: bool, in_range: bool = True) -> np.ndarray:
    """Round to nearest by searching all 256 codes (ties to the even code); an independent
    check of ``ml_dtypes``' rounding. Beyond the largest value plus half a step: overflow."""
    codes = np.arange(256, dtype=np.uint8).view(dtype.as_numpy())
    values = codes.astype(np.float64)
    finite = np.isfinite(values)
    values, codes = values[finite], np.arange(256)[finite]
    top = values.max()
    step = top - np.sort(values)[-2]
    out = []
    for v in np.asarray(x, np.float64).ravel() * 2.0 ** _scale(log2_scale):
        if np.isnan(v) or (abs(v) >= top + step / 2 and nan_on_overflow):
            out.append(np.nan)
            continue
        v = np.clip(v, -top, top)
        dist = np.abs(values - v)
        best = np.flatnonzero(dist == dist.min())
        out.append(values[best[codes[best] % 2 == 0][0] if len(best) > 1 else best[0]])
    return np.array(out).reshape(np.shape(x)).astype(dtype.as_numpy())


def _to_fp8_samples(rng: np.random.Generator) -> list[Sample]:
    big = rng.normal(size=(4, 5)) * 300  # saturates float8_143; NaN overflow: test_popxl_fp8
    return [
        Sample((rng.normal(size=(3, 4)), np.array(0), dtypes.float8_143)),
        Sample((big, np.array(-2), dtypes.float8_143)),
        Sample((big, np.array(0), dtypes.float8_143), {"nan_on_overflow": False}),
        Sample((rng.normal(size=(2, 6)) * 1e4, np.array(-3), dtypes.float8_152)),
    ]


_TO_FP8 = OpDef("pow2scale_cast_to_fp8", _to_fp8_infer, _to_fp8, ref=_nearest_fp8_ref,
                samples=_fp8_samples(_to_fp8_samples))


@register(_TO_FP8)
def pow2scale_cast_to_fp8(t: Tensor, log2_scale: Tensor | int | None = None,
                          data_type: dtypes.dtype = dtypes.float8_143, *,
                          nan_on_overflow: bool = True) -> Tensor:
    """``cast(t * 2**log2_scale, data_type)``: float16/float32 data to fp8.

    Rounds to nearest even. Values beyond the format's largest (240 for float8_143, 57344 for
    float8_152) become NaN, or saturate with ``nan_on_overflow=False``. ``log2_scale`` is an
    int32 scalar tensor (a Python int becomes a constant; None means 0).
    """
    dt = dtypes.as_dtype(data_type)
    if dt not in _FP8:
        raise DTypeError(f"pow2scale_cast_to_fp8: data_type must be an fp8 dtype, got {dt!r}")
    attrs = {"dtype": dt, "nan_on_overflow": bool(nan_on_overflow)}
    return apply1(_TO_FP8, [t, _log2_scale_tensor(log2_scale)], attrs)


def _from_fp8_infer(x: TensorSpec, log2_scale: TensorSpec, dtype: dtypes.dtype,
                    in_range: bool = True) -> TensorSpec:
    _check_fp8(x)
    _check_scale(log2_scale)
    return TensorSpec(x.shape, dtype)


def _from_fp8(x: np.ndarray, log2_scale: np.ndarray, dtype: dtypes.dtype,
              in_range: bool = True) -> np.ndarray:
    scaled = x.astype(np.float32) * np.float32(2.0 ** _scale(log2_scale, in_range))
    return scaled.astype(dtype.as_numpy())


def _from_fp8_ref(x: np.ndarray, log2_scale: np.ndarray, dtype: dtypes.dtype,
                  in_range: bool = True) -> np.ndarray:
    """Decode the bits by hand: sign, exponent (bias 8 or 16), mantissa; 0x80 is NaN."""
    bits = np.asarray(x).view(np.uint8).astype(np.int64)
    mbits, bias = (3, 8) if x.dtype == dtypes.float8_143.as_numpy() else (2, 16)
    sign = np.where(bits & 0x80, -1.0, 1.0)
    exp = (bits >> mbits) & ((1 << (7 - mbits)) - 1)
    man = bits & ((1 << mbits) - 1)
    value = np.where(exp == 0, man / 2.0 ** mbits * 2.0 ** (1 - bias),
                     (1 + man / 2.0 ** mbits) * 2.0 ** (exp - bias))
    value = np.where(bits == 0x80, np.nan, sign * value) * 2.0 ** _scale(log2_scale)
    return value.astype(dtype.as_numpy())


def _from_fp8_samples(rng: np.random.Generator) -> list[Sample]:
    every = np.arange(256, dtype=np.uint8)
    return [Sample((every.view(dtypes.float8_143.as_numpy()), np.array(0), dtypes.float32)),
            Sample((every.view(dtypes.float8_152.as_numpy()), np.array(-3), dtypes.float32)),
            Sample((_to_fp8_values(rng, (3, 4), dtypes.float8_143), np.array(5),
                    dtypes.float16))]


_FROM_FP8 = OpDef("pow2scale_cast_from_fp8", _from_fp8_infer, _from_fp8, ref=_from_fp8_ref,
                  samples=_fp8_samples(_from_fp8_samples))


@register(_FROM_FP8)
def pow2scale_cast_from_fp8(t: Tensor, log2_scale: Tensor | int | None = None,
                            data_type: dtypes.dtype = dtypes.float16) -> Tensor:
    """``cast(t, data_type) * 2**log2_scale``: fp8 data to float16 (default) or float32.

    To undo ``pow2scale_cast_to_fp8`` with scale ``s``, pass ``-s``.
    """
    dt = dtypes.as_dtype(data_type)
    if dt not in (dtypes.float16, dtypes.float32):
        raise DTypeError(f"pow2scale_cast_from_fp8: data_type must be float16 or float32, "
                         f"got {dt!r}")
    return apply1(_FROM_FP8, [t, _log2_scale_tensor(log2_scale, t)], {"dtype": dt})


# -- matmul and conv ---------------------------------------------------------------------------
def _as_float16(y: np.ndarray, s: int) -> np.ndarray:
    return (y * np.float32(2.0 ** s)).astype(np.float16)


def _matmul_p2_infer(a: TensorSpec, b: TensorSpec, log2_scale: TensorSpec,
                     in_range: bool = True) -> TensorSpec:
    _check_fp8(a, b)
    _check_scale(log2_scale)
    return _matmul_infer(TensorSpec(a.shape, dtypes.float16), TensorSpec(b.shape, dtypes.float16))


def _matmul_p2(a: np.ndarray, b: np.ndarray, log2_scale: np.ndarray,
               in_range: bool = True) -> np.ndarray:
    product = np.matmul(a.astype(np.float32), b.astype(np.float32))
    return _as_float16(product, _scale(log2_scale, in_range))


def _matmul_p2_ref(a: np.ndarray, b: np.ndarray, log2_scale: np.ndarray,
                   in_range: bool = True) -> np.ndarray:
    exact = np.matmul(a.astype(np.float64), b.astype(np.float64))
    return (exact * 2.0 ** _scale(log2_scale)).astype(np.float16)


def _matmul_p2_samples(rng: np.random.Generator) -> list[Sample]:
    f143, f152 = dtypes.float8_143, dtypes.float8_152
    return [Sample((_to_fp8_values(rng, (3, 8), f143), _to_fp8_values(rng, (8, 5), f143),
                    np.array(-4))),
            Sample((_to_fp8_values(rng, (2, 3, 4), f143), _to_fp8_values(rng, (4, 2), f152),
                    np.array(2)))]


_MATMUL_P2 = OpDef("matmul_pow2scaled", _matmul_p2_infer, _matmul_p2, ref=_matmul_p2_ref,
                   samples=_fp8_samples(_matmul_p2_samples), tol=1e-3, cost=matmul_cost)


@register(_MATMUL_P2)
def matmul_pow2scaled(lhs: Tensor, rhs: Tensor, log2_scale: Tensor | int,
                      available_memory_proportion: float | None = None) -> Tensor:
    """``(lhs @ rhs) * 2**log2_scale`` for fp8 operands (either format each), in float16.

    The products of fp8 values are exact in float32, which accumulates them.
    ``available_memory_proportion`` is recorded in ``op.hints``.
    """
    hints = {"available_memory_proportion": available_memory_proportion}
    return apply1(_MATMUL_P2, [lhs, rhs, _log2_scale_tensor(log2_scale, lhs, rhs)], hints=hints)


def _scaled(infer: Any, kernel: Any) -> tuple[Any, Any]:
    """Infer and kernel of the pow2-scaled, fp8 form of a convolution op."""
    def p2_infer(x: TensorSpec, w: TensorSpec, log2_scale: TensorSpec,
                 in_range: bool = True, **geometry: Any) -> TensorSpec:
        _check_fp8(x, w)
        _check_scale(log2_scale)
        return infer(*(TensorSpec(s.shape, dtypes.float16) for s in (x, w)), **geometry)

    def p2_kernel(x: np.ndarray, w: np.ndarray, log2_scale: np.ndarray,
                  in_range: bool = True, **geometry: Any) -> np.ndarray:
        y = kernel(x.astype(np.float32), w.astype(np.float32), **geometry)
        return _as_float16(y, _scale(log2_scale, in_range))

    return p2_infer, p2_kernel


def _conv_p2_samples(rng: np.random.Generator) -> list[Sample]:
    f143, f152 = dtypes.float8_143, dtypes.float8_152
    return [Sample((_to_fp8_values(rng, (2, 3, 5, 5), f143),
                    _to_fp8_values(rng, (4, 3, 3, 3), f143), np.array(-3))),
            Sample((_to_fp8_values(rng, (1, 4, 6, 6), f152),
                    _to_fp8_values(rng, (2, 2, 3, 3), f143), np.array(1)),
                   {"stride": (2, 2), "padding": (1, 1, 1, 1), "groups": 2})]


def _conv_t_p2_samples(rng: np.random.Generator) -> list[Sample]:
    f143, f152 = dtypes.float8_143, dtypes.float8_152
    return [Sample((_to_fp8_values(rng, (2, 4, 3, 3), f143),
                    _to_fp8_values(rng, (4, 2, 3, 3), f152), np.array(-2)),
                   {"stride": (2, 2), "padding": (1, 1, 0, 0)})]


_CONV_P2 = OpDef("conv_pow2scaled", *_scaled(_conv_infer, _conv),
                 samples=_fp8_samples(_conv_p2_samples), tol=1e-3, cost=macs(per=3, weight=1))
_CONV_T_P2 = OpDef("conv_transpose_pow2scaled", *_scaled(_conv_transpose_infer, _conv_transpose),
                   samples=_fp8_samples(_conv_t_p2_samples), tol=1e-3,
                   cost=macs(per=0, weight=1))


@register(_CONV_P2)
def conv_pow2scaled(t: Tensor, weight: Tensor, log2_scale: Tensor | int, stride: Any = (1, 1),
                    padding: Any = (0, 0, 0, 0), dilation: Any = (1, 1), groups: int = 1,
                    pad_type: str = "not_set",
                    available_memory_proportions: list[float] | None = None,
                    enable_conv_dithering: list[int] | None = None, *,
                    partials_types: list[str] | None = None) -> Tensor:
    """``conv(t, weight) * 2**log2_scale`` for fp8 data and weight, in float16.

    Geometry arguments as for ``ops.conv``; the planning arguments are recorded in
    ``op.hints``.
    """
    attrs = checked("conv_pow2scaled", [t, weight], lambda: _conv_attrs(
        t, weight, stride, padding, dilation, groups, pad_type))
    hints = planning_hints(available_memory_proportions, partials_types, enable_conv_dithering)
    scale = _log2_scale_tensor(log2_scale, t, weight)
    return apply1(_CONV_P2, [t, weight, scale], attrs, hints=hints)


@register(_CONV_T_P2)
def conv_transpose_pow2scaled(t: Tensor, weight: Tensor, log2_scale: Tensor | int,
                              stride: Any = (1, 1), padding: Any = (0, 0, 0, 0),
                              dilation: Any = (1, 1), groups: int = 1, pad_type: str = "not_set",
                              output_padding: Any = (), output_shape: Any = (),
                              available_memory_proportions: list[float] | None = None,
                              enable_conv_dithering: list[int] | None = None, *,
                              partials_types: list[str] | None = None) -> Tensor:
    """``conv_transpose(t, weight) * 2**log2_scale`` for fp8 data and weight, in float16.

    Arguments as for ``ops.conv_transpose``; the planning arguments go to ``op.hints``.
    """
    attrs = checked("conv_transpose_pow2scaled", [t, weight], lambda: _transpose_attrs(
        t, weight, stride, padding, dilation, groups, pad_type, output_padding, output_shape))
    hints = planning_hints(available_memory_proportions, partials_types, enable_conv_dithering)
    scale = _log2_scale_tensor(log2_scale, t, weight)
    return apply1(_CONV_T_P2, [t, weight, scale], attrs, hints=hints)
