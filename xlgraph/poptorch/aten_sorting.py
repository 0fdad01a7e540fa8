"""Conversions of ATen's sorting, selection, norm and bucketing ops."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from xlgraph import dtypes, ops
from xlgraph.poptorch.table import register
from xlgraph.poptorch.util import Unsupported, dims
from xlgraph.tensor import Tensor, constant


def _axis(dim: int, rank: int) -> int:
    return dims(dim, rank)[0] if rank else 0


@register("aten.topk.default")
def _topk(ctx: Any, x: Tensor, k: int, dim: int = -1, largest: bool = True,
          sorted: bool = True) -> tuple[Tensor, Tensor]:  # noqa: A002
    return ops.topk(x, k, _axis(dim, x.rank), largest=largest)


@register("aten.sort.default", "aten.sort.stable")
def _sort(ctx: Any, x: Tensor, dim: int = -1, descending: bool = False, *,
          stable: Any = None) -> tuple[Tensor, Tensor]:
    if not x.rank:
        return x, constant(np.zeros((), np.int32))
    axis = _axis(dim, x.rank)
    return ops.topk(x, x.shape[axis], axis, largest=descending)


@register("aten.median.dim")
def _median_dim(ctx: Any, x: Tensor, dim: int, keepdim: bool = False) -> tuple[Tensor, Tensor]:
    """torch's median: the lower of the two middle values, and its first index."""
    if not x.rank:
        return x, constant(np.zeros((), np.int32))
    axis = _axis(dim, x.rank)
    n = x.shape[axis]
    values, indices = ops.topk(x, (n + 1) // 2, axis, largest=False)
    last = [(n + 1) // 2 - 1]
    value = ops.slice(values, last, [last[0] + 1], [1], [axis])
    index = ops.slice(indices, last, [last[0] + 1], [1], [axis])
    if not keepdim:
        value, index = ops.squeeze(value, [axis]), ops.squeeze(index, [axis])
    return value, index


@register("aten.median.default")
def _median(ctx: Any, x: Tensor) -> Tensor:
    return _median_dim(ctx, ops.reshape(x, (x.nelms,)), 0)[0]


@register("aten.linalg_vector_norm.default", promote=(0,))
def _vector_norm(ctx: Any, x: Tensor, ord: float = 2, dim: Any = None,  # noqa: A002
                 keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    axes = dims(dim, x.rank) or None
    a = ops.abs(x)
    if ord == math.inf:
        return ops.max(a, axes, keepdims=keepdim)
    if ord == -math.inf:
        return ops.min(a, axes, keepdims=keepdim)
    if ord == 0:
        return ops.sum(ops.cast(ops.not_equal(x, 0.0), x.dtype), axes, keepdims=keepdim)
    if ord == 1:
        return ops.sum(a, axes, keepdims=keepdim)
    if ord == 2:
        return ops.sqrt(ops.sum(x * x, axes, keepdims=keepdim))
    return ops.pow(ops.sum(ops.pow(a, float(ord)), axes, keepdims=keepdim), 1.0 / ord)


@register("aten.var_mean.correction", promote=True)
def _var_mean(ctx: Any, x: Tensor, dim: Any = None, *, correction: Any = None,
              keepdim: bool = False) -> tuple[Tensor, Tensor]:
    from xlgraph.poptorch.aten_math import variance

    axes = dims(dim, x.rank) or tuple(range(x.rank))
    return variance(x, dim, correction, keepdim), ops.mean(x, axes, keepdims=keepdim)


@register("aten.bucketize.Tensor")
def _bucketize(ctx: Any, x: Tensor, boundaries: Tensor, *, out_int32: bool = False,
               right: bool = False) -> Tensor:
    """torch's binary search over ``boundaries`` as given (sorted or not): the first position
    whose boundary is not below ``x`` (``right``: not at or below ``x``); int32 positions."""
    (n,) = boundaries.shape
    x, b = _compared(x, boundaries)
    lo = ops.cast(ops.greater(x, x), dtypes.float32)  # zeros of x's shape
    hi = lo + float(n)
    for _ in range(max(n, 1).bit_length()):  # the range [lo, hi) halves each round
        mid = ops.floor((lo + hi) * 0.5)
        probe = ops.gather(b, ops.cast(ops.where(ops.less(mid, float(n)), mid,
                                                 constant(np.float32(0.0))), dtypes.int32))
        below = ops.greater_equal(x, probe) if right else ops.greater(x, probe)
        open_range = ops.less(lo, hi)
        lo = ops.where(ops.logical_and(open_range, below), mid + 1.0, lo)
        hi = ops.where(ops.logical_and(open_range, ops.logical_not(below)), mid, hi)
    return ops.cast(lo, dtypes.int32)


def _compared(x: Tensor, boundaries: Tensor) -> tuple[Tensor, Tensor]:
    """``x`` and ``boundaries`` in the dtype torch compares them in (a float over an int)."""
    if x.dtype == boundaries.dtype:
        return x, boundaries
    floats = [t.dtype for t in (x, boundaries) if t.dtype.is_floating_point]
    common = max(floats, key=lambda d: d.as_numpy().itemsize) if floats else dtypes.int32
    return ops.cast(x, common), ops.cast(boundaries, common)


@register("aten.bincount.default", "xlgraph_poptorch.bincount.default")
def _bincount(ctx: Any, x: Tensor, weights: Any = None, minlength: int = 0) -> Tensor:
    """Counts (or summed ``weights``) of ``0..n-1``; values outside are not counted."""
    (n,) = ctx.val.shape
    if not isinstance(n, int):
        raise Unsupported("bincount without a static length (its size depends on the data)")
    hits = ops.equal(ops.reshape(x, (-1, 1)), constant(np.arange(n, dtype=np.int32)))
    counts = ops.cast(hits, dtypes.float32 if weights is not None else dtypes.int32)
    if weights is not None:
        counts = counts * ops.reshape(ops.cast(weights, dtypes.float32), (-1, 1))
    return ops.sum(counts, 0)


@register("aten.index_reduce.default", promote=(0, 3))
def _index_reduce(ctx: Any, x: Tensor, dim: int, index: Tensor, source: Tensor, reduce: str,
                  *, include_self: bool = True) -> Tensor:
    from xlgraph.poptorch.aten_shape import scatter_reduce

    d = _axis(dim, x.rank)
    shape = [1] * source.rank
    shape[d] = -1
    full = ops.expand(ops.reshape(index, tuple(shape)), source.shape)
    return scatter_reduce(x, d, full, source, reduce, include_self)


@register("aten._cdist_forward.default", promote=(0, 1))
def _cdist(ctx: Any, a: Tensor, b: Tensor, p: float, compute_mode: Any = None) -> Tensor:
    diff = ops.reshape(a, a.shape[:-1] + (1, a.shape[-1])) - \
        ops.reshape(b, b.shape[:-2] + (1,) + b.shape[-2:])
    return _vector_norm(ctx, diff, p, -1)
