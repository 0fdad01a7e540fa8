"""The rest of torch's pointwise math: inverse and hyperbolic trigonometry, ``expm1``/``log1p``,
``erf``, reciprocals, rounding, the remaining comparisons, ``minimum``, ``remainder``,
``atan2`` and bitwise logic."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from xlgraph import dtypes
from xlgraph.op import Sample
from xlgraph.ops.elementwise import cast, equal, exp, sqrt
from xlgraph.ops.families import binary, unary
from xlgraph.ops.math import floor
from xlgraph.tensor import Tensor

_LN10 = math.log(10.0)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_erf = np.frompyfunc(math.erf, 1, 1)


def _erf_kernel(x: np.ndarray) -> np.ndarray:
    return _erf(x).astype(x.dtype)


# -- trigonometry and hyperbolic functions -----------------------------------------------------
tan = unary("tan", np.tan, grad=lambda g, dy: (dy * (1.0 + g.y(0) * g.y(0)),), domain=(-1.2, 1.2))
asin = unary("asin", np.arcsin, grad=lambda g, dy: (dy / sqrt(1.0 - g.x(0) * g.x(0)),),
             domain=(-0.9, 0.9))
acos = unary("acos", np.arccos, grad=lambda g, dy: (-dy / sqrt(1.0 - g.x(0) * g.x(0)),),
             domain=(-0.9, 0.9))
atan = unary("atan", np.arctan, grad=lambda g, dy: (dy / (1.0 + g.x(0) * g.x(0)),))
sinh = unary("sinh", np.sinh, grad=lambda g, dy: (dy * cosh(g.x(0)),))
cosh = unary("cosh", np.cosh, grad=lambda g, dy: (dy * sinh(g.x(0)),))
asinh = unary("asinh", np.arcsinh, grad=lambda g, dy: (dy / sqrt(g.x(0) * g.x(0) + 1.0),))
acosh = unary("acosh", np.arccosh, grad=lambda g, dy: (dy / sqrt(g.x(0) * g.x(0) - 1.0),),
              domain=(1.2, 3.0))
atanh = unary("atanh", np.arctanh, grad=lambda g, dy: (dy / (1.0 - g.x(0) * g.x(0)),),
              domain=(-0.8, 0.8))

# -- exponentials, logarithms, erf, reciprocals ------------------------------------------------
expm1 = unary("expm1", np.expm1, grad=lambda g, dy: (dy * (g.y(0) + 1.0),))
log1p = unary("log1p", np.log1p, grad=lambda g, dy: (dy / (g.x(0) + 1.0),), domain=(-0.5, 2.0))
log10 = unary("log10", np.log10, grad=lambda g, dy: (dy / (g.x(0) * _LN10),), domain=(0.2, 3.0))
erf = unary("erf", _erf_kernel,
            grad=lambda g, dy: (dy * _TWO_OVER_SQRT_PI * exp(-(g.x(0) * g.x(0))),),
            doc="Elementwise error function.")
reciprocal = unary("reciprocal", np.reciprocal, grad=lambda g, dy: (-dy * g.y(0) * g.y(0),),
                   domain=(0.3, 2.0))
rsqrt = unary("rsqrt", lambda x: np.reciprocal(np.sqrt(x)),
              grad=lambda g, dy: (dy * -0.5 * g.y(0) * g.y(0) * g.y(0),), domain=(0.3, 3.0),
              doc="Elementwise ``1 / sqrt(x)``.")

# -- rounding (piecewise constant: the gradient is zero, as torch defines it) ------------------
_ZERO = {"grad": lambda g, dy: (dy * 0.0,)}
round = unary("round", np.round, doc="Round half to even, as torch.round.", **_ZERO)  # noqa: A001
trunc = unary("trunc", np.trunc, doc="Round towards zero.", **_ZERO)


# -- comparisons -------------------------------------------------------------------------------
def _ties(rng: np.random.Generator) -> list[Sample]:
    return [Sample((rng.integers(0, 3, (3, 4)).astype(float),
                    rng.integers(0, 3, (4,)).astype(float)))]


less = binary("less", np.less, out_dtype=dtypes.bool, samples=_ties)
less_equal = binary("less_equal", np.less_equal, out_dtype=dtypes.bool, samples=_ties)
greater_equal = binary("greater_equal", np.greater_equal, out_dtype=dtypes.bool, samples=_ties)
not_equal = binary("not_equal", np.not_equal, out_dtype=dtypes.bool, samples=_ties)


# -- two-input math ----------------------------------------------------------------------------
def _minimum_grad(g: Any, dy: Tensor) -> tuple[Tensor, Tensor]:
    """Ties send half the gradient to each side, as torch does."""
    a, b = g.x(0), g.x(1)
    tie = cast(equal(a, b), dy.dtype) * 0.5
    left = cast(less(a, b), dy.dtype) + tie
    return dy * left, dy * (1.0 - left)


def _maximum_grad(g: Any, dy: Tensor) -> tuple[Tensor, Tensor]:
    a, b = g.x(0), g.x(1)
    tie = cast(equal(a, b), dy.dtype) * 0.5
    left = cast(less(b, a), dy.dtype) + tie
    return dy * left, dy * (1.0 - left)


minimum = binary("minimum", np.minimum, grad=_minimum_grad, samples=_ties,
                 doc="Elementwise minimum of two tensors (ties share the gradient).")
maximum2 = binary("maximum2", np.maximum, grad=_maximum_grad, samples=_ties,
                  doc="Elementwise maximum of two tensors (ties share the gradient, as torch).")


def _divisor_samples(rng: np.random.Generator) -> list[Sample]:
    b = rng.uniform(0.6, 1.7, (3, 4)) * rng.choice([-1.0, 1.0], (3, 4))
    return [Sample((rng.uniform(-4, 4, (3, 4)), b))]


remainder = binary(
    "remainder", np.remainder, grad=lambda g, dy: (dy, -dy * floor(g.x(0) / g.x(1))),
    samples=_divisor_samples, doc="Elementwise remainder with the sign of the divisor (``%``).")
floor_divide = binary("floor_divide", np.floor_divide, grad=lambda g, dy: (dy * 0.0, dy * 0.0),
                      samples=_divisor_samples, doc="Elementwise ``floor(a / b)``.")


def _atan2_grad(g: Any, dy: Tensor) -> tuple[Tensor, Tensor]:
    y, x = g.x(0), g.x(1)
    scale = dy / (x * x + y * y)
    return scale * x, -scale * y


atan2 = binary("atan2", np.arctan2, grad=_atan2_grad, domain=(0.3, 2.0),
               doc="Elementwise angle of the point ``(x=rhs, y=lhs)``.")


# -- bitwise logic (integer and bool tensors) --------------------------------------------------
def _ints(rng: np.random.Generator) -> list[Sample]:
    return [Sample((rng.integers(-8, 8, (3, 4)).astype(np.int32),
                    rng.integers(-8, 8, (4,)).astype(np.int32)), grad=False)]


bitwise_and = binary("bitwise_and", np.bitwise_and, samples=_ints)
bitwise_or = binary("bitwise_or", np.bitwise_or, samples=_ints)
bitwise_xor = binary("bitwise_xor", np.bitwise_xor, samples=_ints)
bitwise_not = unary(
    "bitwise_not", np.invert,
    samples=lambda rng: [Sample((rng.integers(-8, 8, (3, 4)).astype(np.int32),), grad=False)])
logical_xor = binary("logical_xor", np.logical_xor, out_dtype=dtypes.bool, samples=_ties)

__all__ = ["tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "expm1",
           "log1p", "log10", "erf", "reciprocal", "rsqrt", "round", "trunc", "less",
           "less_equal", "greater_equal", "not_equal", "minimum", "maximum2", "remainder",
           "floor_divide", "atan2", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not",
           "logical_xor"]
