"""Elementwise math, activations, comparisons, ``where``, ``cast`` and ``scaled_add``.

Over 400 lines: one family of short OpDefs built by the same ``unary``/``binary`` helpers, whose
gradients call each other (``relu``'s is ``relu_grad``, ``scaled_add``'s mixed form ``cast``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from xlgraph import dtypes
from xlgraph.cost import per_output
from xlgraph.op import (
    REGISTRY,
    OpDef,
    Sample,
    apply1,
    as_tensor,
    broadcast_shapes,
    register,
    same_dtype,
    same_spec,
)
from xlgraph.ops import loops
from xlgraph.ops.families import binary, inplace, unary
from xlgraph.ops.half import always_exact, convert
from xlgraph.ops.replicas import unchanged
from xlgraph.tensor import Tensor, TensorSpec

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_erf = np.frompyfunc(math.erf, 1, 1)

# -- arithmetic --------------------------------------------------------------------------------
add = binary("add", np.add, grad=lambda g, dy: (dy, dy), kernel_out=np.add, loop=loops.add_loop)
sub = binary("sub", np.subtract, grad=lambda g, dy: (dy, -dy), kernel_out=np.subtract)
mul = binary(
    "mul", np.multiply, grad=lambda g, dy: (dy * g.x(1), dy * g.x(0)), kernel_out=np.multiply
)
def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a / b``. Integers divide as C does: the quotient rounds toward zero, and a zero divisor
    raises ``ZeroDivisionError`` (PopXL's CPU reference runs C++ integer division, which has no
    result for it; it used to give INT_MIN here)."""
    if a.dtype.kind not in "iu":
        return np.true_divide(a, b)
    if not np.all(b):
        raise ZeroDivisionError(f"integer division by zero ({b.size - np.count_nonzero(b)} zero "
                                f"divisor(s))")
    return np.floor_divide(a, b) + ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0)))


div = binary(
    "div", _divide, grad=lambda g, dy: (dy / g.x(1), -dy * g.y(0) / g.x(1)),
    kernel_out=np.true_divide,
    doc="Elementwise division with broadcasting; integers round toward zero, and an integer "
        "division by zero raises (the run fails naming the op).",
)
pow = binary(  # noqa: A001 - PopXL's public name
    "pow", np.power,
    grad=lambda g, dy: (dy * g.x(1) * g.x(0) ** (g.x(1) - 1.0), dy * g.y(0) * log(g.x(0))),
    domain=(0.5, 2.0), kernel_out=np.power, operands=("t", "e"),
)
negate = unary("negate", np.negative, grad=lambda g, dy: (-dy,), kernel_out=np.negative)

# -- transcendental ----------------------------------------------------------------------------
exp = unary("exp", np.exp, grad=lambda g, dy: (dy * g.y(0),), kernel_out=np.exp)
exp_ = inplace("exp")
log = unary("log", np.log, grad=lambda g, dy: (dy / g.x(0),), domain=(0.2, 3.0),
            kernel_out=np.log)
sqrt = unary("sqrt", np.sqrt, grad=lambda g, dy: (dy * 0.5 / g.y(0),), domain=(0.2, 3.0),
             kernel_out=np.sqrt)
tanh = unary("tanh", np.tanh, grad=lambda g, dy: (dy * (1.0 - g.y(0) * g.y(0)),),
             kernel_out=np.tanh)
sign = unary("sign", np.sign, doc="Elementwise sign (-1, 0 or 1); no gradient.")
abs = unary("abs", np.abs, grad=lambda g, dy: (dy * sign(g.x(0)),), kernel_out=np.abs)  # noqa: A001


# -- activations -------------------------------------------------------------------------------
def _relu_out(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0, out=out)


def _relu(x: np.ndarray) -> np.ndarray:
    return _relu_out(x, np.empty(x.shape, x.dtype))


def _relu_grad_out(dy: np.ndarray, y: np.ndarray, out: np.ndarray) -> np.ndarray:
    return np.multiply(dy, np.greater(y, 0), out=out)


def _relu_grad(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    return _relu_grad_out(dy, y, np.empty(dy.shape, dy.dtype))


def _grad_samples(domain: tuple[float, float]):
    def samples(rng: np.random.Generator) -> list[Sample]:
        return [Sample((rng.normal(size=(3, 4)), rng.uniform(*domain, (3, 4))))]

    return samples


_RELU_GRAD = OpDef("relu_grad", same_spec, _relu_grad, elementwise=True,
                   samples=_grad_samples((-2.0, 2.0)), kernel_out=_relu_grad_out,
                   widen_half=True, half_exact=always_exact)
relu_grad = register(_RELU_GRAD)(lambda dy, y: apply1(_RELU_GRAD, [dy, y]))
relu = unary("relu", _relu, grad=lambda g, dy: (relu_grad(dy, g.y(0)),),
             samples=lambda rng: [Sample((rng.uniform(-2, 2, (3, 4)) + 0.05,))],
             kernel_out=_relu_out, half_exact=always_exact)
relu_ = inplace("relu")


_EXP_MAX = {np.float16: 11.0, np.float32: 80.0, np.float64: 700.0}  # exp stays finite below


def _consts(*values: float) -> dict[np.dtype, tuple[Any, ...]]:
    """``values`` and the exp clamp as 0-d arrays per float dtype: ufuncs take those about twice
    as fast as Python floats, with the same result (a Python float is cast to the array dtype)."""
    return {np.dtype(t): (*(np.asarray(v, t) for v in values), np.asarray(top, t))
            for t, top in _EXP_MAX.items()}


# gelu(x) = 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)) with u = sqrt(2/pi) (x + 0.044715 x^3)
_K = 0.044715
_GELU_C = (-2 * _SQRT_2_OVER_PI * _K, -2 * _SQRT_2_OVER_PI, 1.0)
_GELU_GRAD_C = (*_GELU_C, 6 * _SQRT_2_OVER_PI * _K, 2 * _SQRT_2_OVER_PI)
_GELU_CONSTS = _consts(*_GELU_C)
_GELU_GRAD_CONSTS = _consts(*_GELU_GRAD_C)
_GELU_FLOPS = 8  # numpy operations per element in _gelu_out
_GELU_GRAD_FLOPS = 16  # ... and in _gelu_grad_out


def _gelu_out(x: np.ndarray, out: np.ndarray, scratch: tuple[np.ndarray]) -> np.ndarray:
    """``gelu`` into ``out`` (which may be ``x``), with one scratch array; no allocation."""
    a, b, one, top = _GELU_CONSTS.get(x.dtype, (*_GELU_C, 80.0))
    (t,) = scratch
    np.multiply(x, x, out=t)
    np.multiply(t, a, out=t)
    np.add(t, b, out=t)
    np.multiply(t, x, out=t)  # -2u
    np.minimum(t, top, out=t)  # the result is 0 (to rounding) long before exp overflows
    np.exp(t, out=t)
    np.add(t, one, out=t)
    return np.divide(x, t, out=out)


def _gelu(x: np.ndarray) -> np.ndarray:
    return _gelu_out(x, np.empty(x.shape, x.dtype), (np.empty(x.shape, x.dtype),))


def _gelu_grad_out(dy: np.ndarray, x: np.ndarray, out: np.ndarray,
                   scratch: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """``gelu_grad`` into ``out`` (distinct from the inputs), with two scratch arrays.

    With ``s = 1 / (1 + exp(-2u))``: ``d gelu / dx = s (1 + x 2u' (1 - s))``.
    """
    a, b, one, c, d, top = _GELU_GRAD_CONSTS.get(x.dtype, (*_GELU_GRAD_C, 80.0))
    p, s = scratch
    np.multiply(x, x, out=p)
    np.multiply(p, a, out=s)
    np.add(s, b, out=s)
    np.multiply(s, x, out=s)
    np.minimum(s, top, out=s)
    np.exp(s, out=s)
    np.add(s, one, out=s)
    np.reciprocal(s, out=s)  # s = sigmoid(2u)
    np.multiply(p, c, out=p)
    np.add(p, d, out=p)
    np.multiply(p, x, out=p)  # x 2u'
    np.subtract(one, s, out=out)
    np.multiply(out, p, out=out)
    np.add(out, one, out=out)
    np.multiply(out, s, out=out)
    return np.multiply(out, dy, out=out)


def _gelu_grad(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    return _gelu_grad_out(dy, x, np.empty(dy.shape, dy.dtype),
                          (np.empty(x.shape, x.dtype), np.empty(x.shape, x.dtype)))


def _loop_with(fn: Any, fn32: Any, consts: tuple[float, ...], max_elements: int) -> Any:
    """An ``OpDef.loop`` running ``fn`` (``fn32`` on float32, vectorised: any size) with
    ``consts`` and the exp clamp of the dtype, for tensors of at most ``max_elements`` (numpy's
    SIMD exp wins on larger ones)."""
    def loop(ins: list[TensorSpec]) -> Any:
        dtype = np.dtype(ins[0].dtype.as_numpy()).type
        top = _EXP_MAX.get(dtype, 0.0)
        if dtype is np.float32:
            return loops.float_only(ins[0], fn32, (*consts, top))
        return loops.float_only(ins[0], fn, (*consts, top), max_elements=max_elements)

    return loop


_GELU_GRAD = OpDef("gelu_grad", same_spec, _gelu_grad, elementwise=True,
                   samples=_grad_samples((-3.0, 3.0)), kernel_out=_gelu_grad_out,
                   loop=_loop_with(loops.gelu_grad, loops.gelu_grad32, _GELU_GRAD_C,
                                   loops.EXP_GRAD_LOOP_MAX),
                   scratch=2, cost=per_output(_GELU_GRAD_FLOPS), widen_half=True)
gelu_grad = register(_GELU_GRAD)(lambda dy, x: apply1(_GELU_GRAD, [dy, x]))
gelu = unary("gelu", _gelu, grad=lambda g, dy: (gelu_grad(dy, g.x(0)),),
             doc="GELU, tanh approximation (PopXL's ``gelu``).", domain=(-3.0, 3.0),
             kernel_out=_gelu_out,
             loop=_loop_with(loops.gelu, loops.gelu32, _GELU_C, loops.EXP_LOOP_MAX),
             scratch=1, cost=per_output(_GELU_FLOPS))
gelu_ = inplace("gelu")


def _geluerf(x: np.ndarray) -> np.ndarray:
    return (0.5 * x * (1.0 + _erf(x * _INV_SQRT_2).astype(x.dtype))).astype(x.dtype, copy=False)


def _geluerf_grad(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    cdf = 0.5 * (1.0 + _erf(x * _INV_SQRT_2).astype(x.dtype))
    return (dy * (cdf + x * _INV_SQRT_2PI * np.exp(-0.5 * x * x))).astype(x.dtype, copy=False)


_GELUERF_GRAD = OpDef("geluerf_grad", same_spec, _geluerf_grad, elementwise=True,
                      samples=_grad_samples((-3.0, 3.0)), widen_half=True)
geluerf_grad = register(_GELUERF_GRAD)(lambda dy, x: apply1(_GELUERF_GRAD, [dy, x]))
geluerf = unary("geluerf", _geluerf, grad=lambda g, dy: (geluerf_grad(dy, g.x(0)),),
                doc="GELU with the exact erf formulation.", domain=(-3.0, 3.0))
geluerf_ = inplace("geluerf")

# -- comparisons and selection -----------------------------------------------------------------
equal = binary("equal", np.equal, out_dtype=dtypes.bool,
               samples=lambda rng: [Sample((rng.integers(0, 3, (3, 4)).astype(float),
                                            rng.integers(0, 3, (3, 4)).astype(float)))])
greater = binary("greater", np.greater, out_dtype=dtypes.bool, operands=("input", "other"))


def _where_infer(cond: TensorSpec, lhs: TensorSpec, rhs: TensorSpec) -> TensorSpec:
    same_dtype(lhs, rhs)
    if cond.dtype is not dtypes.bool:
        from xlgraph.errors import DTypeError

        raise DTypeError(f"condition must be bool, got {cond}")
    return TensorSpec(broadcast_shapes(cond.shape, lhs.shape, rhs.shape), lhs.dtype)


def _where_grad(g: Any, dy: Tensor) -> tuple[Any, ...]:
    zero = as_tensor(0.0, dy)
    return None, where(g.x(0), dy, zero), where(g.x(0), zero, dy)


_WHERE = OpDef(
    "where", _where_infer, np.where, _where_grad, elementwise=True,
    samples=lambda rng: [Sample((rng.uniform(size=(3, 4)) > 0.5, rng.normal(size=(3, 4)),
                                 rng.normal(size=(4,))))],
)


@register(_WHERE)
def where(condition: Tensor, lhs: Any, rhs: Any) -> Tensor:
    """Elementwise ``lhs if condition else rhs`` with broadcasting."""
    if not isinstance(lhs, Tensor):
        lhs = as_tensor(lhs, rhs)
    rhs = as_tensor(rhs, lhs)
    return apply1(_WHERE, [condition, lhs, rhs])


# -- casts -------------------------------------------------------------------------------------
def _cast_infer(t: TensorSpec, dtype: dtypes.dtype) -> TensorSpec:
    return TensorSpec(t.shape, dtype)


def _cast(x: np.ndarray, dtype: dtypes.dtype) -> np.ndarray:
    return convert(x, dtype.as_numpy())


def _cast_out(x: np.ndarray, out: np.ndarray, dtype: dtypes.dtype) -> np.ndarray:
    convert(x, dtype.as_numpy(), out)
    return out


_CAST = OpDef(
    "cast", _cast_infer, _cast, lambda g, dy: (dy,), elementwise=True, kernel_out=_cast_out,
    c_contiguous=True,  # ``convert`` gives C order
    samples=lambda rng: [
        Sample((rng.normal(size=(3, 4)),), {"data_type": dtypes.float64}),
        Sample((rng.normal(size=(3, 4)) * 4,), {"data_type": dtypes.int32}, grad=False),
    ],
)


@register(_CAST)
def cast(t: Tensor, data_type: dtypes.dtype) -> Tensor:
    """Convert ``t`` to ``data_type``."""
    return apply1(_CAST, [t], {"dtype": dtypes.as_dtype(data_type)})


# -- scaled add --------------------------------------------------------------------------------
def _scaled_add_infer(x: TensorSpec, y: TensorSpec, a: float, b: float) -> TensorSpec:
    same_dtype(x, y)
    if x.shape != y.shape:
        from xlgraph.errors import ShapeError

        raise ShapeError(f"scaled_add does not broadcast: X {x} vs Y {y}")
    return x


def _scaled_add(x: np.ndarray, y: np.ndarray, a: float, b: float) -> np.ndarray:
    return a * x + b * y if a != 1.0 else x + b * y


def _scaled_add_inplace(x: np.ndarray, y: np.ndarray, a: float, b: float) -> np.ndarray:
    if a != 1.0:
        x *= a
    x += b * y
    return x


def _scaled_add_inplace_out(x: np.ndarray, y: np.ndarray, out: np.ndarray,
                            scratch: tuple[np.ndarray], a: float, b: float) -> np.ndarray:
    """``scaled_add_`` into ``out`` (``x`` itself, or a spare array of its shape), computing
    ``b * y`` in a scratch array; the steps run in the kernel's order, which matters when ``y``
    aliases ``x``."""
    if a != 1.0:
        x = np.multiply(x, a, out=out)
    np.multiply(y, b, out=scratch[0])
    return np.add(x, scratch[0], out=out)


def _scaled_add_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample((rng.normal(size=(3, 4)), rng.normal(size=(3, 4))), {"a": 0.5, "b": -1.5})]


_SCALED_ADD = OpDef("scaled_add", _scaled_add_infer, _scaled_add,
                    lambda g, dy: (dy * g.attrs["a"], dy * g.attrs["b"]), elementwise=True,
                    samples=_scaled_add_samples, cost=per_output(3), widen_half=True)


def _scaled_add_loop(ins: list[TensorSpec], a: float, b: float) -> Any:
    return loops.float_only(ins[0], loops.scaled_add, (a, b))


_SCALED_ADD_ = OpDef("scaled_add_", _scaled_add_infer, _scaled_add_inplace, inplace_of=0,
                     replicated=unchanged(_scaled_add_inplace),
                     samples=_scaled_add_samples, ref=_scaled_add,
                     kernel_out=_scaled_add_inplace_out, loop=_scaled_add_loop, scratch=1,
                     cost=per_output(3), widen_half=True)


def _mixed(X: Tensor, Y: Tensor, a: Any, b: Any) -> Tensor | None:  # noqa: N803
    """``a * X + b * Y`` in X's dtype when ``a``/``b`` are scalar tensors or ``Y`` has another
    dtype (poplibs' mixed-precision scaled add): the terms are formed in the widest float dtype
    among the operands and the sum is rounded once to X's dtype. None when all are plain."""
    tensors = [v for v in (Y, a, b) if isinstance(v, Tensor)]
    if Y.dtype == X.dtype and len(tensors) == 1:
        return None
    if len(tensors) == 1 and _narrower(Y.dtype, X.dtype):
        return None  # the terms in X's dtype: the plain op on Y cast (``scaled_add*`` below)
    floats = [t.dtype for t in (X, *tensors) if t.dtype.is_floating_point and not t.dtype.is_fp8]
    wide = max(floats, key=lambda d: d.as_numpy().itemsize, default=X.dtype)

    def up(v: Any) -> Tensor:
        t = v if isinstance(v, Tensor) else as_tensor(v, X)
        return t if t.dtype == wide else cast(t, wide)

    terms = [up(X) if _is_one(a) else up(X) * up(a), up(Y) if _is_one(b) else up(Y) * up(b)]
    value = terms[0] + terms[1]
    return value if value.dtype == X.dtype else cast(value, X.dtype)


def _narrower(y: dtypes.dtype, x: dtypes.dtype) -> bool:
    """A float ``y`` narrower than float ``x``: with number factors, the mixed form is the plain
    op on ``cast(Y, x)`` (its constants and arithmetic are in ``x`` either way), bit for bit,
    in one pass (an Adam updater in float16 added to a float32 weight)."""
    return (y.is_floating_point and x.is_floating_point and not y.is_fp8 and not x.is_fp8
            and y.as_numpy().itemsize < x.as_numpy().itemsize)


def _plain(X: Tensor, Y: Tensor) -> Tensor:  # noqa: N803
    """``Y`` in ``X``'s dtype."""
    return Y if Y.dtype == X.dtype else cast(Y, X.dtype)


def _is_one(value: Any) -> bool:
    return not isinstance(value, Tensor) and float(value) == 1.0


@register(_SCALED_ADD)
def scaled_add(X: Tensor, Y: Tensor, a: Any = 1.0, b: Any = 1.0) -> Tensor:  # noqa: N803
    """``a * X + b * Y`` without broadcasting, in X's dtype; ``a``/``b`` are numbers or scalar
    tensors of any float dtype, and ``Y`` may have another dtype (the sum is then formed in the
    wider dtype and rounded once, as PopXL's mixed-precision scaled add)."""
    value = _mixed(X, Y, a, b)
    if value is not None:
        return value
    return apply1(_SCALED_ADD, [X, _plain(X, Y)], {"a": float(a), "b": float(b)})


@register(_SCALED_ADD_)
def scaled_add_(X: Tensor, Y: Tensor, a: Any = 1.0, b: Any = 1.0) -> Tensor:  # noqa: N803
    """In-place ``X = a * X + b * Y``; returns the updated ``X``. ``a``, ``b`` and ``Y`` as
    for ``scaled_add`` (a float16 weight updated with ``b=-lr`` for a float32 ``lr`` input
    stays float16)."""
    value = _mixed(X, Y, a, b)
    if value is not None:
        # copy_var_update_, by name: ops.var_updates, where it is defined, imports this module
        return apply1(REGISTRY["copy_var_update_"], [X, value])
    return apply1(_SCALED_ADD_, [X, _plain(X, Y)], {"a": float(a), "b": float(b)})


def _add_inplace_infer(x: TensorSpec, y: TensorSpec) -> TensorSpec:
    same_dtype(x, y)
    if broadcast_shapes(x.shape, y.shape) != x.shape:
        from xlgraph.errors import ShapeError

        raise ShapeError(f"add_ cannot broadcast {y} into the in-place target {x}")
    return x


def _add_inplace(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    x += y
    return x


_ADD_ = OpDef("add_", _add_inplace_infer, _add_inplace, inplace_of=0, ref=np.add,
              samples=lambda rng: [Sample((rng.normal(size=(3, 4)), rng.normal(size=(4,))))])


@register(_ADD_)
def add_(lhs: Tensor, rhs: Any) -> Tensor:
    """In-place ``lhs += rhs`` (``rhs`` broadcast to ``lhs``); returns the updated ``lhs``."""
    return apply1(_ADD_, [lhs, as_tensor(rhs, lhs)])
