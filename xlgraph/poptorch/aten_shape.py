"""Conversions of ATen's view, movement, indexing and creation ops."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from xlgraph import dtypes, ops
from xlgraph.ops.indexing import take_along_axis
from xlgraph.poptorch.table import register
from xlgraph.poptorch.util import Unsupported, dims, xlgraph_dtype
from xlgraph.tensor import Tensor, constant


def _d(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim


@register("operator.getitem")
def _getitem(ctx: Any, value: Any, index: Any) -> Any:
    """An output of a multi-output op; outputs xlgraph does not compute (max pooling's
    indices, batch norm's saved statistics) are None, and fail where something uses them."""
    return operator.getitem(value, index)


@register("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default")
def _view(ctx: Any, x: Tensor, size: Sequence[int]) -> Tensor:
    return ops.reshape(x, tuple(int(s) for s in size))


@register("aten.permute.default")
def _permute(ctx: Any, x: Tensor, dims_: Sequence[int]) -> Tensor:
    return ops.transpose(x, [_d(d, x.rank) for d in dims_]) if x.rank > 1 else x


@register("aten.transpose.int", "aten.transpose_.default")
def _transpose(ctx: Any, x: Tensor, dim0: int, dim1: int) -> Tensor:
    perm = list(range(x.rank))
    a, b = _d(dim0, x.rank), _d(dim1, x.rank)
    perm[a], perm[b] = perm[b], perm[a]
    return ops.transpose(x, perm) if a != b else x


@register("aten.t.default")
def _t(ctx: Any, x: Tensor) -> Tensor:
    return ops.transpose(x) if x.rank == 2 else x


@register("aten.expand.default")
def _expand(ctx: Any, x: Tensor, size: Sequence[int], *, implicit: bool = False) -> Tensor:
    lead = len(size) - x.rank
    shape = tuple(x.shape[i - lead] if s == -1 else int(s) for i, s in enumerate(size))
    return x if shape == x.shape else ops.expand(x, shape)


@register("aten.squeeze.dims", "aten.squeeze.dim", "aten.squeeze.default")
def _squeeze(ctx: Any, x: Tensor, dim: Any = None) -> Tensor:
    axes = [d for d in (dims(dim, x.rank) if dim is not None else range(x.rank))
            if x.shape[d] == 1]
    return ops.reshape(x, tuple(s for i, s in enumerate(x.shape) if i not in axes))


@register("aten.unsqueeze.default")
def _unsqueeze(ctx: Any, x: Tensor, dim: int) -> Tensor:
    d = _d(dim, x.rank + 1)
    return ops.reshape(x, x.shape[:d] + (1,) + x.shape[d:])


@register("aten.cat.default", promote=True)
def _cat(ctx: Any, tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    parts = [t for t in tensors if t.shape != (0,)]
    return parts[0] if len(parts) == 1 else ops.concat(parts, _d(dim, parts[0].rank))


@register("aten.slice.Tensor")
def _slice(ctx: Any, x: Tensor, dim: int = 0, start: Any = None, end: Any = None,
           step: int = 1) -> Tensor:
    d = _d(dim, x.rank)
    lo, hi, st = slice(start, end, step).indices(x.shape[d])
    if (lo, hi, st) == (0, x.shape[d], 1):
        return x
    return ops.slice(x, [lo], [max(hi, lo)], [st], [d])


@register("aten.select.int")
def _select(ctx: Any, x: Tensor, dim: int, index: int) -> Tensor:
    d = _d(dim, x.rank)
    i = index + x.shape[d] if index < 0 else index
    part = ops.slice(x, [i], [i + 1], [1], [d])
    return ops.reshape(part, x.shape[:d] + x.shape[d + 1:])


@register("aten.split_with_sizes.default")
def _split(ctx: Any, x: Tensor, split_sizes: Sequence[int], dim: int = 0) -> list[Tensor]:
    return ops.split(x, [int(s) for s in split_sizes], _d(dim, x.rank))


@register("aten.clone.default", "aten.alias.default", "aten.lift_fresh_copy.default",
          "aten.contiguous.default")
def _same(ctx: Any, x: Tensor, *, memory_format: Any = None) -> Tensor:
    return x


@register("aten.detach.default")
def _detach(ctx: Any, x: Tensor) -> Tensor:
    return ops.detach(x)


@register("aten._to_copy.default")
def _to_copy(ctx: Any, x: Tensor, *, dtype: Any = None, **_: Any) -> Tensor:
    return x if dtype is None else ops.cast(x, xlgraph_dtype(dtype))


@register("aten.copy.default", "aten.copy_.default")
def _copy(ctx: Any, x: Tensor, src: Tensor, non_blocking: bool = False) -> Tensor:
    src = src if src.dtype == x.dtype else ops.cast(src, x.dtype)
    return src if src.shape == x.shape else ops.expand(src, x.shape)


@register("aten.constant_pad_nd.default")
def _pad(ctx: Any, x: Tensor, pad: Sequence[int], value: float = 0.0) -> Tensor:
    """``pad`` lists (before, after) pairs from the last dim backwards; negative crops."""
    for i in range(len(pad) // 2):
        d = x.rank - 1 - i
        before, after = int(pad[2 * i]), int(pad[2 * i + 1])
        if before < 0 or after < 0:
            x = ops.slice(x, [max(-before, 0)], [x.shape[d] - max(-after, 0)], [1], [d])
            before, after = max(before, 0), max(after, 0)
        parts = []
        for n in (before, after):
            shape = x.shape[:d] + (n,) + x.shape[d + 1:]
            parts.append(constant(np.full(shape, value, x.dtype.as_numpy())) if n else None)
        x = ops.concat([p for p in (parts[0], x, parts[1]) if p is not None], d) \
            if before or after else x
    return x


@register("aten.flip.default")
def _flip(ctx: Any, x: Tensor, dims_: Sequence[int]) -> Tensor:
    for d in dims(dims_, x.rank):
        index = constant(np.arange(x.shape[d] - 1, -1, -1, dtype=np.int32))
        x = ops.gather(x, index, d)
    return x


@register("aten.repeat.default")
def _repeat(ctx: Any, x: Tensor, repeats: Sequence[int]) -> Tensor:
    lead = len(repeats) - x.rank
    x = ops.reshape(x, (1,) * lead + x.shape)
    for d, n in enumerate(repeats):
        if n != 1:
            x = ops.concat([x] * int(n), d) if n else ops.slice(x, [0], [0], [1], [d])
    return x


# -- indexing ----------------------------------------------------------------------------------
def _index(t: Tensor) -> Tensor:
    return t if t.dtype == dtypes.int32 else ops.cast(t, dtypes.int32)


@register("aten.index_select.default")
def _index_select(ctx: Any, x: Tensor, dim: int, index: Tensor) -> Tensor:
    if not x.rank:
        return x
    return ops.gather(x, ops.reshape(_index(index), (index.nelms,)), _d(dim, x.rank))


@register("aten.embedding.default")
def _embedding(ctx: Any, weight: Tensor, indices: Tensor, padding_idx: int = -1,
               scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    if scale_grad_by_freq:
        raise Unsupported("scale_grad_by_freq=True")
    rows = ops.gather(weight, _index(indices), 0)
    if padding_idx < 0:
        return rows
    keep = ops.reshape(ops.not_equal(indices, padding_idx), indices.shape + (1,))
    return ops.where(keep, rows, ops.detach(rows))  # no gradient reaches the padding row


@register("aten.gather.default")
def _gather(ctx: Any, x: Tensor, dim: int, index: Tensor, *, sparse_grad: bool = False) -> Tensor:
    if not x.rank:  # a 0-d input: every index is 0
        picked = take_along_axis(ops.reshape(x, (1,)), ops.reshape(_index(index), (-1,)), 0)
        return ops.reshape(picked, index.shape)
    return take_along_axis(x, _index(index), _d(dim, x.rank))


def _flat_targets(x: Tensor, d: int, index: Tensor) -> Tensor:
    """The position in flattened ``x`` that each element of ``index`` addresses (``index``
    may be smaller than ``x`` in every dim, as torch allows)."""
    strides = [int(np.prod(x.shape[k + 1:])) for k in range(x.rank)]
    grid = np.indices(index.shape)
    offsets = sum(grid[k] * strides[k] for k in range(index.rank) if k != d)
    idx = _index(index)
    idx = ops.where(ops.less(idx, 0), idx + x.shape[d], idx)
    linear = idx * strides[d] + constant(np.asarray(offsets, np.int32))
    return ops.reshape(linear, (index.nelms,))


def _source(src: Any, index: Tensor, dtype: Any) -> Tensor:
    """The leading ``index.shape`` block of ``src`` (a number fills it), flattened."""
    if not isinstance(src, Tensor):
        src = constant(np.full(index.shape, src, dtype.as_numpy()))
    elif src.shape != index.shape:
        src = ops.slice(src, [0] * index.rank, list(index.shape), [1] * index.rank,
                        list(range(index.rank)))
    return ops.reshape(src, (index.nelms,))


@register("aten.scatter.src", "aten.scatter.value", promote=(0, 3))
def _scatter(ctx: Any, x: Tensor, dim: int, index: Tensor, src: Any) -> Tensor:
    if not x.rank:
        return _source(src, ops.reshape(index, (1,)), x.dtype) if index.nelms else x
    flat = ops.scatter(ops.reshape(x, (x.nelms,)), _flat_targets(x, _d(dim, x.rank), index),
                       _source(src, index, x.dtype), 0)
    return ops.reshape(flat, x.shape)


@register("aten.scatter.reduce", "aten.scatter.value_reduce", promote=(0, 3))
def _scatter_reduce_arg(ctx: Any, x: Tensor, dim: int, index: Tensor, src: Any,
                        *, reduce: str) -> Tensor:
    return scatter_reduce(x, dim, index, src, {"add": "sum", "multiply": "prod"}[reduce], True)


@register("aten.scatter_add.default", promote=(0, 3))
def _scatter_add(ctx: Any, x: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    return scatter_reduce(x, dim, index, src, "sum", True)


@register("aten.scatter_reduce.two", promote=(0, 3))
def _scatter_reduce(ctx: Any, x: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str,
                    *, include_self: bool = True) -> Tensor:
    return scatter_reduce(x, dim, index, src, reduce, include_self)


def scatter_reduce(x: Tensor, dim: int, index: Tensor, src: Any, reduce: str,
                   include_self: bool) -> Tensor:
    """torch's ``scatter_reduce`` (sum, prod, amax, amin, mean), on the flattened tensor."""
    shape, n = x.shape, x.nelms
    x1 = ops.reshape(x, (n,))
    targets = _flat_targets(x, _d(dim, x.rank), index) if x.rank else ops.reshape(
        _index(index), (index.nelms,))
    values = _source(src, index, x.dtype)
    op = {"sum": "sum", "prod": "mul", "amax": "max", "amin": "min", "mean": "sum"}[reduce]
    reduced = ops.scatter_reduce(values, targets, op, x1 if include_self else None, 0, n)
    if reduce == "mean" or not include_self:
        ones = constant(np.ones(index.nelms, x.dtype.as_numpy()))
        count = ops.scatter_reduce(ones, targets, "sum", None, 0, n)
        touched = ops.greater(count, 0.0)
        if reduce == "mean":
            count = count + 1.0 if include_self else count
            reduced = reduced / ops.where(touched, count, 1.0)
        reduced = ops.where(touched, reduced, x1)
    return ops.reshape(reduced, shape)


# -- creation ----------------------------------------------------------------------------------
def _filled(ctx: Any, value: Any) -> Tensor:
    val = ctx.val
    return constant(np.full(tuple(val.shape), value, xlgraph_dtype(val.dtype).as_numpy()))


@register("aten.full.default")
def _full(ctx: Any, size: Any, fill_value: Any, **_: Any) -> Tensor:
    return _filled(ctx, fill_value)


@register("aten.scalar_tensor.default")
def _scalar_tensor(ctx: Any, s: Any, **_: Any) -> Tensor:
    return _filled(ctx, s)


@register("aten.empty.memory_format", "aten.zeros.default", "aten.empty_strided.default",
          "aten.empty_permuted.default", "aten.empty_like.default", "aten.zeros_like.default")
def _zeros(ctx: Any, *args: Any, **_: Any) -> Tensor:
    return _filled(ctx, 0)


@register("aten.ones.default", "aten.ones_like.default")
def _ones(ctx: Any, *args: Any, **_: Any) -> Tensor:
    return _filled(ctx, 1)


@register("aten.full_like.default")
def _full_like(ctx: Any, x: Tensor, fill_value: Any, **_: Any) -> Tensor:
    return _filled(ctx, fill_value)


@register("aten.fill.Scalar")
def _fill(ctx: Any, x: Tensor, value: Any) -> Tensor:
    return _filled(ctx, value)


@register("aten.unfold.default")
def _unfold(ctx: Any, x: Tensor, dim: int, size: int, step: int) -> Tensor:
    """``Tensor.unfold``: the windows ``[i * step, i * step + size)`` of dim ``dim`` (as many
    as fit), each a new last dim of ``size``."""
    if not x.rank:
        return ops.reshape(x, (1,))
    d = _d(dim, x.rank)
    count = (x.shape[d] - size) // step + 1
    index = np.arange(count)[:, None] * step + np.arange(size)[None, :]
    y = ops.gather(x, constant(index.astype(np.int32)), d)
    perm = [a for a in range(y.rank) if a != d + 1] + [d + 1]
    return ops.transpose(y, perm)


@register("aten.diagonal.default")
def _diagonal(ctx: Any, x: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The elements ``(i, i + offset)`` of dims ``dim1``, ``dim2``, as a last dim."""
    d1, d2 = _d(dim1, x.rank), _d(dim2, x.rank)
    perm = [k for k in range(x.rank) if k not in (d1, d2)] + [d1, d2]
    moved = ops.transpose(x, perm)
    n, m = moved.shape[-2:]
    rows = np.arange(max(0, min(n + min(offset, 0), m - max(offset, 0))))
    flat = (rows - min(offset, 0)) * m + rows + max(offset, 0)
    merged = ops.reshape(moved, moved.shape[:-2] + (n * m,))
    return ops.gather(merged, constant(flat.astype(np.int32)), x.rank - 2)


@register("aten.arange.start_step", "aten.arange.default", "aten.arange.start")
def _arange(ctx: Any, *args: Any, **_: Any) -> Tensor:
    numbers = [a for a in args if isinstance(a, int | float)]
    val = ctx.val
    return constant(np.arange(*numbers).astype(xlgraph_dtype(val.dtype).as_numpy()))


@register("aten._assert_tensor_metadata.default", "aten._assert_scalar.default",
          "aten.sym_constrain_range_for_size.default", "aten._assert_async.msg",
          "aten._assert_async.default")
def _assertion(ctx: Any, *args: Any, **kwargs: Any) -> None:
    """torch's own checks of the traced shapes and dtypes, and of values (``one_hot``'s range):
    nothing to run, as on the IPU."""
