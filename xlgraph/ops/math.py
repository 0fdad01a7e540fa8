"""More math: trigonometry, rounding, fmod, predicates, logic, clip, maximum, increment_mod,
cumsum and the reductions prod, l1, l2, sumsquare, logsum and median."""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from xlgraph import dtypes
from xlgraph.errors import ShapeError
from xlgraph.op import (
    OpDef,
    Sample,
    apply1,
    as_tensor,
    broadcast_shapes,
    normalize_axes,
    register,
    same_dtype,
    same_spec,
)
from xlgraph.ops.elementwise import cast, equal, exp, sign
from xlgraph.ops.families import binary, reduction, unary
from xlgraph.ops.reduce import _extreme_grad, _keep
from xlgraph.tensor import Tensor, TensorSpec

_LN2 = math.log(2.0)

# -- trigonometry, logarithms, rounding --------------------------------------------------------
sin = unary("sin", np.sin, grad=lambda g, dy: (dy * cos(g.x(0)),), kernel_out=np.sin)
cos = unary("cos", np.cos, grad=lambda g, dy: (-dy * sin(g.x(0)),), kernel_out=np.cos)
log2 = unary("log2", np.log2, grad=lambda g, dy: (dy / (g.x(0) * _LN2),), domain=(0.2, 3.0),
             kernel_out=np.log2)
floor = unary("floor", np.floor, doc="Elementwise floor; piecewise constant, so no gradient.")
ceil = unary("ceil", np.ceil, doc="Elementwise ceiling; piecewise constant, so no gradient.")


def _fmod_samples(rng: np.random.Generator) -> list[Sample]:
    def divisor(*shape: int) -> np.ndarray:
        return rng.uniform(0.6, 1.7, shape) * rng.choice([-1.0, 1.0], shape)

    return [Sample((rng.uniform(-4, 4, (3, 4)), divisor(3, 4))),
            Sample((rng.uniform(-4, 4, (2, 3, 4)), divisor(4)))]


fmod = binary(
    "fmod", np.fmod, grad=lambda g, dy: (dy, -dy * (g.x(0) - g.y(0)) / g.x(1)),
    samples=_fmod_samples, kernel_out=np.fmod,
    doc="Elementwise remainder with the sign of the dividend (C ``fmod``); also ``%``.",
)


# -- predicates and logic ----------------------------------------------------------------------
def _bool_spec(*specs: TensorSpec) -> TensorSpec:
    return TensorSpec(broadcast_shapes(*(s.shape for s in specs)), dtypes.bool)


def _special_values(rng: np.random.Generator) -> list[Sample]:
    x = rng.normal(size=(3, 5))
    x.flat[[1, 7]] = np.nan
    x.flat[[3, 9]] = [np.inf, -np.inf]
    return [Sample((x,))]


def _predicate(name: str, kernel: Any, doc: str) -> Any:
    defn = OpDef(name, _bool_spec, kernel, elementwise=True, samples=_special_values)

    def builder(t: Tensor) -> Tensor:
        return apply1(defn, [t])

    builder.__name__ = builder.__qualname__ = name
    builder.__doc__ = doc
    return register(defn)(builder)


isnan = _predicate("isnan", np.isnan, "Elementwise ``t != t``: true where ``t`` is NaN.")
isinf = _predicate("isinf", np.isinf, "Elementwise test for positive or negative infinity.")
isfinite = _predicate("isfinite", np.isfinite, "Elementwise test for finite values.")
logical_not = _predicate("logical_not", np.logical_not, "Elementwise logical not (also ``~``).")


def _bools(rng: np.random.Generator) -> list[Sample]:
    return [Sample((rng.uniform(size=(3, 4)) > 0.5, rng.uniform(size=(3, 4)) > 0.5)),
            Sample((rng.uniform(size=(2, 1)) > 0.5, rng.uniform(size=(3,)) > 0.5))]


logical_and = binary("logical_and", np.logical_and, out_dtype=dtypes.bool, samples=_bools,
                     doc="Elementwise logical and with broadcasting (also ``&``).")
logical_or = binary("logical_or", np.logical_or, out_dtype=dtypes.bool, samples=_bools,
                    doc="Elementwise logical or with broadcasting (also ``|``).")


# -- clip and maximum --------------------------------------------------------------------------
def _clip(x: np.ndarray, min: float, max: float) -> np.ndarray:  # noqa: A002
    return np.clip(x, min, max).astype(x.dtype, copy=False)


def _clip_grad(g: Any, dy: Tensor) -> tuple[Tensor]:
    return (dy * cast(equal(g.x(0), g.y(0)), dy.dtype),)


_CLIP = OpDef(
    "clip", same_spec, _clip, _clip_grad, elementwise=True,
    samples=lambda rng: [Sample((rng.uniform(-2, 2, (3, 4)),), {"min": -0.5, "max": 0.7}),
                         Sample((rng.uniform(-2, 2, (2, 5)),), {"min": 0.25}),
                         Sample((rng.uniform(-2, 2, (6,)),))],
)


@register(_CLIP)
def clip(t: Tensor, min: float = -math.inf, max: float = math.inf) -> Tensor:  # noqa: A002
    """Clamp every element of ``t`` to ``[min, max]``; the gradient passes where not clamped."""
    return apply1(_CLIP, [t], {"min": float(min), "max": float(max)})


clamp = clip


def _maximum_infer(*specs: TensorSpec) -> TensorSpec:
    if not specs:
        raise ShapeError("maximum needs at least one tensor")
    same_dtype(*specs)
    return TensorSpec(broadcast_shapes(*(s.shape for s in specs)), specs[0].dtype)


def _maximum(*xs: np.ndarray) -> np.ndarray:
    return functools.reduce(np.maximum, xs)


def _maximum_grad(g: Any, dy: Tensor) -> tuple[Tensor, ...]:
    """Each input gets ``dy`` where it equals the result (PopART's Max gradient)."""
    y = g.y(0)
    return tuple(dy * cast(equal(g.x(i), y), dy.dtype) for i in range(len(g.op.inputs)))


_MAXIMUM = OpDef(
    "maximum", _maximum_infer, _maximum, _maximum_grad, elementwise=True,
    samples=lambda rng: [Sample((rng.normal(size=(3, 4)), rng.normal(size=(3, 4)))),
                         Sample((rng.normal(size=(2, 3)), rng.normal(size=(3,)),
                                 rng.normal(size=(2, 1))))],
)


@register(_MAXIMUM)
def maximum(*ts: Any) -> Tensor:
    """Elementwise maximum of any number of tensors, with broadcasting."""
    first = next((t for t in ts if isinstance(t, Tensor)), None)
    if first is None:
        raise TypeError("maximum needs at least one Tensor")
    return apply1(_MAXIMUM, [as_tensor(t, first) for t in ts])


# -- increment_mod -----------------------------------------------------------------------------
def _increment_mod(x: np.ndarray, increment: float, modulus: float) -> np.ndarray:
    return np.fmod(x + np.asarray(increment, x.dtype), np.asarray(modulus, x.dtype))


def _increment_mod_inplace(x: np.ndarray, increment: float, modulus: float) -> np.ndarray:
    np.copyto(x, _increment_mod(x, increment, modulus))
    return x


def _increment_mod_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample((rng.uniform(0, 2, (3, 4)),), {"increment": 0.5, "modulus": 3.0}),
            Sample((rng.integers(0, 7, (5,)),), {"increment": 3, "modulus": 7}, grad=False)]


_INCREMENT_MOD = OpDef("increment_mod", same_spec, _increment_mod, lambda g, dy: (dy,),
                       elementwise=True, samples=_increment_mod_samples)
_INCREMENT_MOD_ = OpDef("increment_mod_", same_spec, _increment_mod_inplace, inplace_of=0,
                        samples=_increment_mod_samples, ref=_increment_mod)


def _increment_attrs(increment: Any, modulus: Any) -> dict[str, Any]:
    if float(modulus) == 0:
        raise ValueError("increment_mod: modulus must be non-zero")
    return {"increment": increment, "modulus": modulus}


@register(_INCREMENT_MOD)
def increment_mod(t: Tensor, increment: float, modulus: float) -> Tensor:
    """``fmod(t + increment, modulus)`` elementwise (a wrapping counter, for instance)."""
    return apply1(_INCREMENT_MOD, [t], _increment_attrs(increment, modulus))


@register(_INCREMENT_MOD_)
def increment_mod_(t: Tensor, increment: float, modulus: float) -> Tensor:
    """In-place ``increment_mod``: modifies and returns ``t``."""
    return apply1(_INCREMENT_MOD_, [t], _increment_attrs(increment, modulus))


# -- cumsum ------------------------------------------------------------------------------------
def _cumsum(x: np.ndarray, dim: int, reverse: bool) -> np.ndarray:
    if reverse:
        return np.flip(np.cumsum(np.flip(x, dim), axis=dim, dtype=x.dtype), dim)
    return np.cumsum(x, axis=dim, dtype=x.dtype)


def _cumsum_ref(x: np.ndarray, dim: int, reverse: bool) -> np.ndarray:
    """Running sums with an explicit loop over the axis."""
    moved = np.moveaxis(x, dim, 0)
    out = np.zeros_like(moved)
    order = range(moved.shape[0] - 1, -1, -1) if reverse else range(moved.shape[0])
    total = np.zeros_like(moved[0])
    for i in order:
        total = total + moved[i]
        out[i] = total
    return np.moveaxis(out, 0, dim)


_CUMSUM = OpDef(
    "cumsum", same_spec, _cumsum,
    lambda g, dy: (apply1(_CUMSUM, [dy], {**g.attrs, "reverse": not g.attrs["reverse"]}),),
    ref=_cumsum_ref,
    samples=lambda rng: [Sample((rng.normal(size=(4, 3)),)),
                         Sample((rng.normal(size=(2, 3, 5)),), {"dim": -1}),
                         Sample((rng.integers(-5, 5, (6,)),), grad=False)],
)


@register(_CUMSUM)
def cumsum(t: Tensor, dim: int = 0) -> Tensor:
    """Running sum of ``t`` along ``dim`` (default 0, as in PopXL)."""
    return apply1(_CUMSUM, [t], {"dim": normalize_axes(dim, t.rank)[0], "reverse": False})


# -- reductions --------------------------------------------------------------------------------
def _moved(x: np.ndarray, axis: tuple[int, ...]) -> np.ndarray:
    """``x`` with the reduced axes moved to the end and merged into one."""
    rest = [i for i in range(x.ndim) if i not in axis]
    m = np.transpose(x, rest + list(axis))
    return m.reshape(m.shape[: len(rest)] + (-1,))


def _restore(r: np.ndarray, x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    """Undo ``_moved`` for a per-row result ``r``."""
    if keepdims:
        return r.reshape(tuple(1 if i in axis else d for i, d in enumerate(x.shape)))
    return r.reshape(tuple(d for i, d in enumerate(x.shape) if i not in axis))


def _prod(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return np.asarray(np.prod(x, axis=axis, keepdims=keepdims), x.dtype)


def _prod_grad_kernel(dy: np.ndarray, x: np.ndarray, axis: tuple[int, ...],
                      keepdims: bool) -> np.ndarray:
    """Product of all other elements (exclusive prefix x suffix products: zeros are fine)."""
    m = _moved(x, axis)
    ones = np.ones(m.shape[:-1] + (1,), x.dtype)
    before = np.cumprod(np.concatenate([ones, m[..., :-1]], -1), -1)
    after = np.flip(np.cumprod(np.concatenate([ones, np.flip(m, -1)[..., :-1]], -1), -1), -1)
    others = before * after * dy.reshape(m.shape[:-1] + (1,))
    rest = [i for i in range(x.ndim) if i not in axis]
    shaped = others.reshape(tuple(x.shape[i] for i in rest + list(axis)))
    return np.transpose(shaped, np.argsort(rest + list(axis))).astype(x.dtype, copy=False)


def _prod_grad_infer(dy: TensorSpec, x: TensorSpec, **_: Any) -> TensorSpec:
    return x


_PROD_GRAD = OpDef(
    "prod_grad", _prod_grad_infer, _prod_grad_kernel,
    samples=lambda rng: [Sample((rng.normal(size=(3,)), rng.normal(size=(3, 4))),
                                {"axis": (1,), "keepdims": False})],
)


@register(_PROD_GRAD)
def prod_grad(dy: Tensor, x: Tensor, axis: tuple[int, ...], keepdims: bool) -> Tensor:
    """Gradient of ``prod``: ``dy`` times the product of the other reduced elements."""
    return apply1(_PROD_GRAD, [dy, x], {"axis": tuple(axis), "keepdims": bool(keepdims)})


def _positive_reduction_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample((rng.uniform(0.5, 1.5, (3, 4, 5)),), {"axis": None}),
            Sample((rng.uniform(0.2, 2.0, (3, 4, 5)),), {"axis": 1}),
            Sample((rng.uniform(0.2, 2.0, (3, 4, 5)),), {"axis": (0, 2), "keepdims": True})]


def _prod_samples(rng: np.random.Generator) -> list[Sample]:
    x = rng.uniform(-1.5, 1.5, (3, 4))
    x[1, 2] = 0.0
    return [*_positive_reduction_samples(rng), Sample((x,), {"axis": 1})]


def _reduced(kernel: Any) -> Any:
    def run(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
        return np.asarray(kernel(x, axis, keepdims), x.dtype)

    return run


def _l1(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return np.sum(np.abs(x), axis=axis, keepdims=keepdims)


def _sumsquare(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return np.sum(x * x, axis=axis, keepdims=keepdims)


def _l2(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return np.sqrt(_sumsquare(x, axis, keepdims))


def _logsum(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return np.log(np.sum(x, axis=axis, keepdims=keepdims))


def _median(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    """The lower median (element ``(n - 1) // 2`` in sorted order), as PopART returns."""
    m = _moved(x, axis)
    mid = (m.shape[-1] - 1) // 2
    return _restore(np.partition(m, mid, axis=-1)[..., mid], x, axis, keepdims)


def _median_ref(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    """Sort each reduced row with a Python loop and take the lower middle element."""
    m = _moved(x, axis)
    rows = m.reshape(-1, m.shape[-1])
    out = np.array([sorted(row)[(len(row) - 1) // 2] for row in rows], x.dtype)
    return _restore(out, x, axis, keepdims)


prod = reduction("prod", _reduced(_prod), samples=_prod_samples,
                 doc="Product over ``axis`` (all axes when None); its gradient handles zeros.",
                 grad=lambda g, dy: (prod_grad(dy, g.x(0), **g.attrs),))
l1 = reduction("l1", _reduced(_l1), grad=lambda g, dy: (_keep(g, dy) * sign(g.x(0)),),
               doc="Sum of absolute values over ``axis`` (all axes when None).")
l2 = reduction("l2", _reduced(_l2), grad=lambda g, dy: (_keep(g, dy / g.y(0)) * g.x(0),),
               doc="Euclidean norm over ``axis`` (all axes when None).")
sumsquare = reduction("sumsquare", _reduced(_sumsquare),
                      grad=lambda g, dy: (_keep(g, dy) * g.x(0) * 2.0,),
                      doc="Sum of squares over ``axis`` (all axes when None).")
logsum = reduction("logsum", _reduced(_logsum),
                   grad=lambda g, dy: (_keep(g, dy / exp(g.y(0))),),
                   samples=_positive_reduction_samples,
                   doc="Natural log of the sum over ``axis`` (all axes when None).")
median = reduction("median", _reduced(_median), grad=_extreme_grad, ref=_reduced(_median_ref),
                   doc="Lower median over ``axis`` (all axes when None); the gradient goes to "
                       "the median element.")
