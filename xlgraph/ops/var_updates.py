"""In-place updates used by optimisers (PopXL's ``ops.var_updates``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from xlgraph import dtypes
from xlgraph.cost import per_output
from xlgraph.errors import ShapeError
from xlgraph.op import OpDef, Sample, apply1, as_tensor, broadcast_shapes, register, same_dtype
from xlgraph.ops.adam_loops import moving_average_loop
from xlgraph.ops.elementwise import cast
from xlgraph.ops.indexing import add_rows_at, as_index_tensor, check_int_indices
from xlgraph.ops.optim_updates import (
    adam_updater,
    adam_var_update,
    adamax_updater,
    check_scalar,
    lamb_updater,
    scalar,
)
from xlgraph.ops.sgd_updates import sgd_momentum_, sgd_update_
from xlgraph.tensor import Tensor, TensorSpec, constant

__all__ = [
    "accumulate_", "copy_var_update_", "accumulate_square_", "accumulate_mean_",
    "accumulate_moving_average_", "accumulate_moving_average_square_", "accumulator_scale_",
    "accumulator_zero_", "sparse_accumulate_", "adam_updater", "lamb_updater", "adamax_updater",
    "adam_var_update", "sgd_momentum_", "sgd_update_",
]


def _update_infer(t: TensorSpec, x: TensorSpec, **_: Any) -> TensorSpec:
    same_dtype(t, x)
    if broadcast_shapes(t.shape, x.shape) != t.shape:
        raise ShapeError(f"cannot update {t} from {x}")
    return t


def _two(rng: np.random.Generator) -> list[Sample]:
    return [Sample((rng.normal(size=(3, 4)), rng.normal(size=(3, 4))))]


def _accumulate(t: np.ndarray, x: np.ndarray, f: float) -> np.ndarray:
    if f == 1.0:
        t += x
    else:
        t += f * x
    return t


def _accumulate_out(t: np.ndarray, x: np.ndarray, out: np.ndarray, scratch: tuple[np.ndarray],
                    f: float) -> np.ndarray:
    """``accumulate_`` into ``out`` (``t`` itself, or a spare array of its shape), computing
    ``f * x`` in a scratch array."""
    if f == 1.0:
        return np.add(t, x, out=out)
    np.multiply(x, f, out=scratch[0])
    return np.add(t, scratch[0], out=out)




def _copy_update(t: np.ndarray, x: np.ndarray) -> np.ndarray:
    np.copyto(t, x)
    return t


_ACCUMULATE = OpDef("accumulate_", _update_infer, _accumulate, inplace_of=0,
                    ref=lambda t, x, f: t + f * x, kernel_out=_accumulate_out, scratch=1,
                    samples=lambda rng: [Sample(_two(rng)[0].args, {"f": 0.3})], widen_half=True)
_COPY_VAR_UPDATE = OpDef("copy_var_update_", _update_infer, _copy_update, inplace_of=0,
                         ref=lambda t, x: np.broadcast_to(x, t.shape).copy(), samples=_two,
                         cost=per_output(0))


@register(_ACCUMULATE)
def accumulate_(t: Tensor, X: Tensor, f: Any = None) -> Tensor:  # noqa: N803
    """In place ``t += f * X`` (``f`` defaults to 1; a number or a scalar tensor). As in PopXL
    ``X`` of another dtype is taken in ``t``'s (an int32 constant into a float32 variable)."""
    if isinstance(X, Tensor) and X.dtype is not t.dtype:
        X = cast(X, t.dtype)  # noqa: N806 - PopXL's name
    if isinstance(f, Tensor):
        return copy_var_update_(t, t + X * f)
    return apply1(_ACCUMULATE, [t, X], {"f": 1.0 if f is None else float(f)})


@register(_COPY_VAR_UPDATE)
def copy_var_update_(t: Tensor, X: Tensor) -> Tensor:  # noqa: N803
    """In place ``t = X``."""
    return apply1(_COPY_VAR_UPDATE, [t, as_tensor(X, t)])


# -- updates with a scalar factor (a number or a scalar tensor) --------------------------------
def _updater_of(X: Any, t: Tensor) -> Tensor:  # noqa: N803
    """``X`` as a tensor of ``t``'s dtype: a float updater of another float dtype is cast, as
    PopART's accumulate ops take e.g. a float32 gradient into a float16 accumulator."""
    x = as_tensor(X, t)
    if x.dtype is not t.dtype and x.dtype.is_floating_point and t.dtype.is_floating_point:
        from xlgraph.ops.elementwise import cast

        x = cast(x, t.dtype)
    return x


def _factor_infer(t: TensorSpec, x: TensorSpec, f: TensorSpec) -> TensorSpec:
    check_scalar(f, "the factor")
    return _update_infer(t, x)


def _accumulate_square(t: np.ndarray, x: np.ndarray, f: np.ndarray) -> np.ndarray:
    t += f.item() * np.square(x)
    return t


def _accumulate_mean(t: np.ndarray, x: np.ndarray, step: np.ndarray) -> np.ndarray:
    n = step.item()
    t *= n / (n + 1.0)
    t += x / (n + 1.0)
    return t


def _moving_average(t: np.ndarray, x: np.ndarray, f: np.ndarray) -> np.ndarray:
    f = f.item()
    t *= f
    t += (1.0 - f) * x
    return t


def _moving_average_square(t: np.ndarray, x: np.ndarray, f: np.ndarray) -> np.ndarray:
    return _moving_average(t, np.square(x), f)


def _moving_average_out(square: bool) -> Any:
    """The ``kernel_out`` of ``accumulate_moving_average(_square)_``: into ``out`` (``t``
    itself, or a spare array of its shape), ``(1 - f) X`` (of ``X**2``) in a scratch array, in
    the kernel's order (``X`` being ``t``: squared before, else read after ``t`` is scaled, as
    the kernel does)."""
    def kernel_out(t: np.ndarray, x: np.ndarray, f: np.ndarray, out: np.ndarray,
                   scratch: tuple[np.ndarray]) -> np.ndarray:
        f = f.item()
        src = np.square(x, out=scratch[0]) if square else x
        np.multiply(t, f, out=out)
        if src is t:
            src = out
        np.multiply(src, 1.0 - f, out=scratch[0])
        return np.add(out, scratch[0], out=out)

    return kernel_out


def _factor_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample((rng.normal(size=(3, 4)), rng.normal(size=(3, 4)), np.array(0.3))),
            Sample((rng.normal(size=(2, 3)), rng.normal(size=(3,)), np.array(4.0)))]


def _factor_def(name: str, kernel: Any, ref: Any, **fast: Any) -> OpDef:
    """An in-place update with a scalar factor; ``fast``: its ``kernel_out``, ``scratch`` and
    ``loop``."""
    return OpDef(name, _factor_infer, kernel, inplace_of=0, ref=ref, samples=_factor_samples,
                 widen_half=True, **fast)


_ACCUMULATE_SQUARE = _factor_def("accumulate_square_", _accumulate_square,
                                 lambda t, x, f: t + f * x * x)
_ACCUMULATE_MEAN = _factor_def("accumulate_mean_", _accumulate_mean,
                               lambda t, x, n: t * (n / (n + 1.0)) + x / (n + 1.0))
_MOVING_AVERAGE = _factor_def(
    "accumulate_moving_average_", _moving_average, lambda t, x, f: f * t + (1.0 - f) * x,
    kernel_out=_moving_average_out(False), scratch=1, loop=moving_average_loop(False))
_MOVING_AVERAGE_SQUARE = _factor_def(
    "accumulate_moving_average_square_", _moving_average_square,
    lambda t, x, f: f * t + (1.0 - f) * x * x, kernel_out=_moving_average_out(True), scratch=1,
    loop=moving_average_loop(True))


@register(_ACCUMULATE_SQUARE)
def accumulate_square_(t: Tensor, X: Tensor, f: Any = 1.0) -> Tensor:  # noqa: N803
    """In place ``t = t + f * X**2``."""
    return apply1(_ACCUMULATE_SQUARE, [t, _updater_of(X, t), scalar(f, t)])


@register(_ACCUMULATE_MEAN)
def accumulate_mean_(t: Tensor, X: Tensor, step: Any) -> Tensor:  # noqa: N803
    """In place ``t = t * step / (step + 1) + X / (step + 1)``: the running mean of ``X`` when
    ``step`` counts the values already averaged (0 for the first)."""
    return apply1(_ACCUMULATE_MEAN, [t, _updater_of(X, t), scalar(step, t)])


def _factor(f: Any, t: Tensor) -> Tensor:
    """A moving average's factor: a Python number stays float32 for a float16 accumulator,
    so ``1 - f`` is formed before narrowing, as PopART forms it on the host (``1 - 0.9`` is
    0.1 rounded once, not ``1 - float16(0.9)`` = 0.1001, a +0.1 % bias on every step)."""
    if isinstance(f, Tensor) or t.dtype is not dtypes.float16:
        return scalar(f, t)
    return constant(np.float32(f), dtypes.float32)


@register(_MOVING_AVERAGE)
def accumulate_moving_average_(t: Tensor, X: Tensor, f: Any) -> Tensor:  # noqa: N803
    """In place ``t = f * t + (1 - f) * X``."""
    return apply1(_MOVING_AVERAGE, [t, _updater_of(X, t), _factor(f, t)])


@register(_MOVING_AVERAGE_SQUARE)
def accumulate_moving_average_square_(t: Tensor, X: Tensor, f: Any) -> Tensor:  # noqa: N803
    """In place ``t = f * t + (1 - f) * X**2``."""
    return apply1(_MOVING_AVERAGE_SQUARE, [t, _updater_of(X, t), _factor(f, t)])


def _scale_infer(t: TensorSpec, f: TensorSpec) -> TensorSpec:
    check_scalar(f, "the factor")
    return t


def _accumulator_scale(t: np.ndarray, f: np.ndarray) -> np.ndarray:
    f = f.item()
    if f == 0.0:  # zeroing also clears NaN and inf, as PopART does
        t.fill(0)
    else:
        t *= f
    return t


_ACCUMULATOR_SCALE = OpDef(
    "accumulator_scale_", _scale_infer, _accumulator_scale, inplace_of=0,
    ref=lambda t, f: t * f if f != 0 else np.zeros_like(t),
    samples=lambda rng: [Sample((rng.normal(size=(3, 4)), np.array(0.25))),
                         Sample((rng.normal(size=(3, 4)), np.array(0.0)))],
)


@register(_ACCUMULATOR_SCALE)
def accumulator_scale_(t: Tensor, f: Any) -> Tensor:
    """In place ``t = f * t``; with ``f == 0`` the result is exactly zero (even for NaN)."""
    return apply1(_ACCUMULATOR_SCALE, [t, scalar(f, t)])


def accumulator_zero_(t: Tensor) -> Tensor:
    """In place ``t = 0`` (``accumulator_scale_(t, 0.0)``)."""
    return accumulator_scale_(t, 0.0)


# -- sparse accumulate -------------------------------------------------------------------------
def _sparse_infer(t: TensorSpec, x: TensorSpec, indices: TensorSpec, f: TensorSpec,
                  axis: int) -> TensorSpec:
    same_dtype(t, x)
    check_int_indices(indices)
    check_scalar(f, "the factor")
    want = t.shape[:axis] + indices.shape + t.shape[axis + 1:]
    if x.shape != want:
        raise ShapeError(f"X must have the gathered shape {want}, got {x}")
    return t


def _sparse_accumulate(t: np.ndarray, x: np.ndarray, indices: np.ndarray, f: np.ndarray,
                       axis: int) -> np.ndarray:
    add_rows_at(t, x * f.item(), indices, axis)
    return t


def _sparse_accumulate_ref(t, x, indices, f, axis):
    out = t.copy()
    for pos in np.ndindex(*x.shape):
        i = int(indices[pos[axis: axis + indices.ndim]])
        out[pos[:axis] + (i,) + pos[axis + indices.ndim:]] += f * x[pos]
    return out


_SPARSE_ACCUMULATE = OpDef(
    "sparse_accumulate_", _sparse_infer, _sparse_accumulate, inplace_of=0,
    ref=_sparse_accumulate_ref,
    samples=lambda rng: [
        Sample((rng.normal(size=(5, 3)), rng.normal(size=(4, 3)), rng.integers(0, 5, (4,)), 0,
                np.array(0.5))),
        Sample((rng.normal(size=(2, 6)), rng.normal(size=(2, 2, 3)), rng.integers(0, 6, (2, 3)),
                1, np.array(-1.5))),
    ],
)


@register(_SPARSE_ACCUMULATE)
def sparse_accumulate_(t: Tensor, X: Tensor, indices: Any, axis: int = 0, f: Any = None,  # noqa: N803
                       W: Tensor | None = None) -> Tensor:  # noqa: N803
    """In place ``t += f * X`` for ``X`` shaped like ``gather(t, indices, axis)``: each slice of
    ``X`` is added to the slice of ``t`` it was gathered from (repeated indices accumulate).

    ``W``, the tensor gathered from, only guides tile layout in PopXL; here it must merely match
    ``t``'s shape when given.
    """
    if W is not None and W.shape != t.shape:
        raise ShapeError(f"sparse_accumulate_: W {W.spec} must have the shape of t {t.spec}")
    attrs = {"axis": int(axis) % max(t.rank, 1)}
    return apply1(_SPARSE_ACCUMULATE, [t, as_tensor(X, t), as_index_tensor(indices),
                                       scalar(1.0 if f is None else f, t)], attrs)
