"""Reductions: sum, mean, max, min, argmax, argmin."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from xlgraph import dtypes
from xlgraph.op import OpDef, Sample, apply1, normalize_axes, register
from xlgraph.ops import loops
from xlgraph.ops.families import reduction
from xlgraph.tensor import Tensor, TensorSpec


def _keep(g: Any, dy: Tensor) -> Tensor:
    """``dy`` reshaped so that it broadcasts against the forward input."""
    from xlgraph.ops.movement import expand, reshape

    axis, x = g.attrs["axis"], g.x(0)
    if not g.attrs["keepdims"]:
        dy = reshape(dy, tuple(1 if i in axis else d for i, d in enumerate(x.shape)))
    return expand(dy, x.shape)


def _count(g: Any) -> int:
    shape = g.x(0).shape
    return int(np.prod([shape[i] for i in g.attrs["axis"]], dtype=np.int64))


def _reduce_with(ufunc: np.ufunc):
    """``kernel_out`` and ``kernel`` reducing with ``ufunc``; the kernel writes into a fresh
    C-ordered array of the input's dtype, so both give the same bits and the inferred dtype."""

    def kernel_out(x: np.ndarray, axis: tuple[int, ...], keepdims: bool,
                   out: np.ndarray) -> np.ndarray:
        return ufunc.reduce(x, axis, None, out, keepdims)

    def kernel(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
        shape = tuple(1 if i in axis else d for i, d in enumerate(x.shape)
                      if keepdims or i not in axis)
        return kernel_out(x, axis, keepdims, np.empty(shape, x.dtype))

    return kernel, kernel_out


_sum, _sum_out = _reduce_with(np.add)


def _mean(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return np.mean(x, axis=axis, keepdims=keepdims)


_max, _max_out = _reduce_with(np.maximum)
_min, _min_out = _reduce_with(np.minimum)


def _extreme_grad(g: Any, dy: Tensor) -> tuple[Tensor]:
    """Gradient of max/min: shared equally between the tied extreme elements."""
    from xlgraph.ops.elementwise import cast, equal
    from xlgraph.ops.movement import expand, reshape

    x = g.x(0)
    y = g.y(0)
    if not g.attrs["keepdims"]:
        y = reshape(y, tuple(1 if i in g.attrs["axis"] else d for i, d in enumerate(x.shape)))
    mask = cast(equal(x, expand(y, x.shape)), x.dtype)
    ties = sum(mask, g.attrs["axis"], keepdims=True)
    return (_keep(g, dy) * mask / expand(ties, x.shape),)


def _sum_loop(ins: list[TensorSpec], axis: tuple[int, ...], keepdims: bool) -> Any:
    """The loop form for sums over leading axes that leave some axis (numpy adds those row by
    row, as the loop does; a sum over the last axes it does pairwise)."""
    shape = ins[0].shape
    if axis != tuple(range(len(axis))) or not 0 < len(axis) < len(shape):
        return None
    return loops.float_only(ins[0], loops.sum_leading, ints=(math.prod(shape[:len(axis)]),))


sum = reduction("sum", _sum, grad=lambda g, dy: (_keep(g, dy),),  # noqa: A001
                kernel_out=_sum_out, loop=_sum_loop)
mean = reduction("mean", _mean, grad=lambda g, dy: (_keep(g, dy) * (1.0 / _count(g)),))
max = reduction("max", _max, grad=_extreme_grad, kernel_out=_max_out)  # noqa: A001
min = reduction("min", _min, grad=_extreme_grad, kernel_out=_min_out)  # noqa: A001


def _arg_infer(t: TensorSpec, dim: int, keepdim: bool) -> TensorSpec:
    shape = tuple(1 if i == dim else d for i, d in enumerate(t.shape) if keepdim or i != dim)
    return TensorSpec(shape, dtypes.int32)


def _arg_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample((rng.normal(size=(4, 5)),), {"dim": 1}), Sample((rng.normal(size=(4, 5)),))]


def _argmax(x: np.ndarray, dim: int, keepdim: bool) -> np.ndarray:
    return np.argmax(x, axis=dim, keepdims=keepdim).astype(np.int32)


def _argmin(x: np.ndarray, dim: int, keepdim: bool) -> np.ndarray:
    return np.argmin(x, axis=dim, keepdims=keepdim).astype(np.int32)


_ARGMAX = OpDef("argmax", _arg_infer, _argmax, samples=_arg_samples)
_ARGMIN = OpDef("argmin", _arg_infer, _argmin, samples=_arg_samples)


@register(_ARGMAX)
def argmax(t: Tensor, dim: int = 0, keepdim: bool = False) -> Tensor:
    """Index of the largest element along ``dim`` (default 0, as in PopXL); int32."""
    return apply1(_ARGMAX, [t], {"dim": normalize_axes(dim, t.rank)[0], "keepdim": bool(keepdim)})


@register(_ARGMIN)
def argmin(t: Tensor, dim: int = 0, keepdim: bool = False) -> Tensor:
    """Index of the smallest element along ``dim`` (default 0, as in PopXL); int32."""
    return apply1(_ARGMIN, [t], {"dim": normalize_axes(dim, t.rank)[0], "keepdim": bool(keepdim)})
