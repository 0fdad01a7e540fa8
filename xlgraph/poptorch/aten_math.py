"""Conversions of ATen's pointwise, comparison and reduction ops.

Every pointwise entry asks the walker for torch's type promotion, so its inputs arrive in one
dtype and broadcasting is xlgraph's (numpy's, the same as torch's).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from xlgraph import dtypes, ops
from xlgraph.poptorch.table import register
from xlgraph.poptorch.util import dims
from xlgraph.tensor import Tensor, constant


def _pointwise(name: str, fn: Any) -> None:
    register(f"aten.{name}.default", promote=True)(lambda ctx, x: fn(x))


for _name, _fn in {
    "abs": ops.abs, "neg": ops.negate, "exp": ops.exp, "expm1": ops.expm1, "log": ops.log,
    "log2": ops.log2, "log10": ops.log10, "log1p": ops.log1p, "sqrt": ops.sqrt,
    "rsqrt": ops.rsqrt, "reciprocal": ops.reciprocal, "sin": ops.sin, "cos": ops.cos,
    "tan": ops.tan, "asin": ops.asin, "acos": ops.acos, "atan": ops.atan, "sinh": ops.sinh,
    "cosh": ops.cosh, "tanh": ops.tanh, "asinh": ops.asinh, "acosh": ops.acosh,
    "atanh": ops.atanh, "sigmoid": ops.sigmoid, "erf": ops.erf, "floor": ops.floor,
    "ceil": ops.ceil, "round": ops.round, "trunc": ops.trunc, "sign": ops.sign,
    "sgn": ops.sign, "relu": ops.relu, "silu": ops.swish, "bitwise_not": ops.bitwise_not,
    "logical_not": ops.logical_not, "isnan": ops.isnan, "isinf": ops.isinf,
}.items():
    _pointwise(_name, _fn)


@register("aten.exp2.default", promote=True)
def _exp2(ctx: Any, x: Tensor) -> Tensor:
    return ops.exp(x * math.log(2.0))


@register("aten.erfc.default", promote=True)
def _erfc(ctx: Any, x: Tensor) -> Tensor:
    return 1.0 - ops.erf(x)


@register("aten.gelu.default", promote=True)
def _gelu(ctx: Any, x: Tensor, approximate: str = "none") -> Tensor:
    return ops.gelu(x) if approximate == "tanh" else ops.geluerf(x)


@register("aten.hardtanh.default", "aten.clamp.default", promote=(0,))
def _clamp(ctx: Any, x: Tensor, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        return _clamp_tensor(ctx, x, min, max)
    low = -math.inf if min is None else min
    high = math.inf if max is None else max
    if not x.dtype.is_floating_point:
        y = x if min is None else ops.where(ops.less(x, low), low, x)
        return y if max is None else ops.where(ops.greater(y, high), high, y)
    return ops.clip(x, low, high)


@register("aten.clamp_min.default", promote=(0,))
def _clamp_min(ctx: Any, x: Tensor, min: Any) -> Tensor:  # noqa: A002
    return _clamp(ctx, x, min, None)


@register("aten.clamp_max.default", promote=(0,))
def _clamp_max(ctx: Any, x: Tensor, max: Any) -> Tensor:  # noqa: A002
    return _clamp(ctx, x, None, max)


@register("aten.clamp.Tensor", promote=True)
def _clamp_tensor(ctx: Any, x: Tensor, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
    y = x if min is None else ops.maximum2(x, min)
    return y if max is None else ops.minimum(y, max)


@register("aten.leaky_relu.default", promote=True)
def _leaky_relu(ctx: Any, x: Tensor, negative_slope: float = 0.01) -> Tensor:
    return ops.where(ops.greater(x, 0.0), x, x * negative_slope)


@register("aten.elu.default", promote=True)
def _elu(ctx: Any, x: Tensor, alpha: float = 1.0, scale: float = 1.0,
         input_scale: float = 1.0) -> Tensor:
    negative = ops.expm1(ops.minimum(x, 0.0) * input_scale) * alpha
    return ops.where(ops.greater(x, 0.0), x, negative) * scale


@register("aten.softplus.default", promote=True)
def _softplus(ctx: Any, x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    scaled = x * beta
    soft = ops.log1p(ops.exp(ops.minimum(scaled, threshold))) * (1.0 / beta)
    return ops.where(ops.greater(scaled, threshold), x, soft)


@register("aten.mish.default", promote=True)
def _mish(ctx: Any, x: Tensor) -> Tensor:
    return x * ops.tanh(_softplus(ctx, x))


@register("aten.hardswish.default", promote=True)
def _hardswish(ctx: Any, x: Tensor) -> Tensor:
    return x * ops.clip(x + 3.0, 0.0, 6.0) * (1.0 / 6.0)


# -- two and three inputs ----------------------------------------------------------------------
def _binary(names: tuple[str, ...], fn: Any) -> None:
    register(*names, promote=True)(lambda ctx, a, b: fn(a, b))


for _names, _fn in {
    ("aten.mul.Tensor", "aten.mul.Scalar"): ops.mul,
    ("aten.div.Tensor", "aten.div.Scalar"): ops.div,
    ("aten.pow.Tensor_Tensor", "aten.pow.Tensor_Scalar", "aten.pow.Scalar"): ops.pow,
    ("aten.remainder.Tensor", "aten.remainder.Scalar"): ops.remainder,
    ("aten.fmod.Tensor", "aten.fmod.Scalar"): ops.fmod,
    ("aten.atan2.default",): ops.atan2,
    ("aten.maximum.default",): ops.maximum2,
    ("aten.minimum.default",): ops.minimum,
    ("aten.eq.Tensor", "aten.eq.Scalar"): ops.equal,
    ("aten.ne.Tensor", "aten.ne.Scalar"): ops.not_equal,
    ("aten.gt.Tensor", "aten.gt.Scalar"): ops.greater,
    ("aten.ge.Tensor", "aten.ge.Scalar"): ops.greater_equal,
    ("aten.lt.Tensor", "aten.lt.Scalar"): ops.less,
    ("aten.le.Tensor", "aten.le.Scalar"): ops.less_equal,
    ("aten.logical_and.default",): ops.logical_and,
    ("aten.logical_or.default",): ops.logical_or,
    ("aten.logical_xor.default",): ops.logical_xor,
    ("aten.bitwise_and.Tensor", "aten.bitwise_and.Scalar"): ops.bitwise_and,
    ("aten.bitwise_or.Tensor", "aten.bitwise_or.Scalar"): ops.bitwise_or,
    ("aten.bitwise_xor.Tensor", "aten.bitwise_xor.Scalar"): ops.bitwise_xor,
}.items():
    _binary(_names, _fn)


@register("aten.add.Tensor", "aten.add.Scalar", promote=True)
def _add(ctx: Any, a: Any, b: Any, alpha: Any = 1) -> Tensor:
    return ops.add(a, b if alpha == 1 else b * alpha)


@register("aten.sub.Tensor", "aten.sub.Scalar", promote=True)
def _sub(ctx: Any, a: Any, b: Any, alpha: Any = 1) -> Tensor:
    return ops.sub(a, b if alpha == 1 else b * alpha)


@register("aten.rsub.Scalar", "aten.rsub.Tensor", promote=True)
def _rsub(ctx: Any, a: Any, b: Any, alpha: Any = 1) -> Tensor:
    return ops.sub(b, a if alpha == 1 else a * alpha)


@register("aten.div.Tensor_mode", "aten.div.Scalar_mode", promote=True)
def _div_mode(ctx: Any, a: Any, b: Any, rounding_mode: str | None = None) -> Tensor:
    if rounding_mode is None:
        return ops.div(a, b)
    if not a.dtype.is_floating_point:
        return ops.floor_divide(a, b) if rounding_mode == "floor" else \
            ops.cast(ops.trunc(ops.div(ops.cast(a, dtypes.float32), ops.cast(
                b, dtypes.float32) if isinstance(b, Tensor) else b)), a.dtype)
    q = ops.div(a, b)
    return ops.floor(q) if rounding_mode == "floor" else ops.trunc(q)


@register("aten.where.self", promote=(1, 2))
def _where(ctx: Any, condition: Tensor, a: Any, b: Any) -> Tensor:
    return ops.where(condition, a, b)


@register("aten.lerp.Scalar", "aten.lerp.Tensor", promote=True)
def _lerp(ctx: Any, start: Tensor, end: Tensor, weight: Any) -> Tensor:
    return start + (end - start) * weight


# -- reductions --------------------------------------------------------------------------------
def _reduce(op: Any) -> Any:
    def convert(ctx: Any, x: Tensor, dim: Any = None, keepdim: bool = False, *,
                dtype: Any = None) -> Tensor:
        axes = dims(dim, x.rank)
        return op(x, axes if axes else None, keepdims=keepdim) if x.rank else x
    return convert


register("aten.sum.dim_IntList", "aten.sum.default", promote="result")(_reduce(ops.sum))
register("aten.mean.dim", "aten.mean.default", promote=True)(_reduce(ops.mean))
register("aten.amax.default")(_reduce(ops.max))
register("aten.amin.default")(_reduce(ops.min))
register("aten.prod.dim_int", "aten.prod.default", promote="result")(_reduce(ops.prod))
register("aten.logsumexp.default")(_reduce(ops.logsumexp))


@register("aten.max.default")
def _max_all(ctx: Any, x: Tensor) -> Tensor:
    return ops.max(x)


@register("aten.min.default")
def _min_all(ctx: Any, x: Tensor) -> Tensor:
    return ops.min(x)


@register("aten.max.dim")
def _max_dim(ctx: Any, x: Tensor, dim: int, keepdim: bool = False) -> tuple[Tensor, Tensor]:
    d = dims(dim, x.rank)[0] if x.rank else 0
    return ops.max(x, d, keepdims=keepdim), _arg(ops.argmax, x, d, keepdim)


@register("aten.min.dim")
def _min_dim(ctx: Any, x: Tensor, dim: int, keepdim: bool = False) -> tuple[Tensor, Tensor]:
    d = dims(dim, x.rank)[0] if x.rank else 0
    return ops.min(x, d, keepdims=keepdim), _arg(ops.argmin, x, d, keepdim)


def _arg(op: Any, x: Tensor, dim: int | None, keepdim: bool) -> Tensor:
    if x.rank == 0:
        return constant(np.zeros((), np.int32))
    if dim is None:
        flat = op(ops.reshape(x, (x.nelms,)), 0, False)
        return ops.reshape(flat, (1,) * x.rank) if keepdim else flat
    return op(x, dims(dim, x.rank)[0], keepdim)


@register("aten.argmax.default")
def _argmax(ctx: Any, x: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    return _arg(ops.argmax, x, dim, keepdim)


@register("aten.argmin.default")
def _argmin(ctx: Any, x: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    return _arg(ops.argmin, x, dim, keepdim)


@register("aten.any.default", "aten.any.dim", "aten.any.dims")
def _any(ctx: Any, x: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    as_int = ops.cast(ops.not_equal(x, 0) if x.dtype != dtypes.bool else x, dtypes.int32)
    axes = dims(dim, x.rank)
    return ops.greater(ops.sum(as_int, axes if axes else None, keepdims=keepdim), 0)


def variance(x: Tensor, dim: Any, correction: Any, keepdim: bool) -> Tensor:
    """torch's variance over ``dim`` (all dims when None) with Bessel's ``correction``."""
    axes = dims(dim, x.rank) or tuple(range(x.rank))
    count = math.prod(x.shape[a] for a in axes)
    centred = x - ops.mean(x, axes, keepdims=True)
    total = ops.sum(centred * centred, axes, keepdims=keepdim)
    return total * (1.0 / max(count - (1 if correction is None else correction), 0))


@register("aten.var.correction", promote=True)
def _var(ctx: Any, x: Tensor, dim: Any = None, *, correction: Any = None,
         keepdim: bool = False) -> Tensor:
    return variance(x, dim, correction, keepdim)


@register("aten.cumsum.default", promote="result")
def _cumsum(ctx: Any, x: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
    return ops.cumsum(x, dims(dim, x.rank)[0]) if x.rank else x


@register("aten.cumprod.default", promote="result")
def _cumprod(ctx: Any, x: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
    if not x.rank:
        return x
    d = dims(dim, x.rank)[0]
    parts = ops.split(x, x.shape[d], d)
    out, running = [parts[0]], parts[0]
    for part in parts[1:]:
        running = running * part
        out.append(running)
    return ops.concat(out, d)
