"""Conversions of ATen's view, movement, indexing and creation ops."""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from xlgraph import dtypes, ops
from xlgraph.op import broadcast_shapes
from xlgraph.poptorch.table import register
from xlgraph.poptorch.util import Unsupported, dims, xlgraph_dtype
from xlgraph.tensor import Tensor, constant


def _d(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim


@register("operator.getitem")
def _getitem(ctx: Any, value: Any, index: Any) -> Any:
    item = operator.getitem(value, index)
    if item is None:
        raise Unsupported("this output of the op (e.g. max pooling indices) is not converted")
    return item


@register("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default")
def _view(ctx: Any, x: Tensor, size: Sequence[int]) -> Tensor:
    return ops.reshape(x, tuple(int(s) for s in size))


@register("aten.permute.default")
def _permute(ctx: Any, x: Tensor, dims_: Sequence[int]) -> Tensor:
    return ops.transpose(x, [_d(d, x.rank) for d in dims_]) if x.rank > 1 else x


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


@register("aten.copy.default")
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
    return ops.gather(x, _index(index), _d(dim, x.rank))


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
    return ops.take_along_axis(x, _index(index), _d(dim, x.rank))


@register("aten.index.Tensor")
def _index_tensor(ctx: Any, x: Tensor, indices: Sequence[Tensor | None]) -> Tensor:
    """Advanced indexing: index tensors on consecutive leading-or-not dims broadcast together."""
    used = [i for i, t in enumerate(indices) if t is not None]
    if any(indices[i].dtype.name == "bool" for i in used):
        raise Unsupported("boolean mask indexing (its result shape depends on the data)")
    if used != list(range(used[0], used[-1] + 1)):
        raise Unsupported("index tensors on non-adjacent dims")
    first = used[0]
    shapes = [indices[i].shape for i in used]
    bshape = broadcast_shapes(*shapes)
    flat = None
    for i in used:
        idx = _index(indices[i])
        idx = idx if idx.shape == bshape else ops.expand(idx, bshape)
        idx = ops.where(ops.less(idx, 0), idx + x.shape[i], idx)
        flat = idx if flat is None else flat * x.shape[i] + idx
    merged = math.prod(x.shape[i] for i in used)
    y = ops.reshape(x, x.shape[:first] + (merged,) + x.shape[used[-1] + 1:])
    return ops.gather(y, flat, first)


@register("aten.scatter.src", "aten.scatter.value", promote=(0, 3))
def _scatter(ctx: Any, x: Tensor, dim: int, index: Tensor, src: Any) -> Tensor:
    d = _d(dim, x.rank)
    if not isinstance(src, Tensor):
        src = constant(np.full(index.shape, src, x.dtype.as_numpy()))
    elif src.shape != index.shape:
        src = ops.slice(src, [0] * index.rank, list(index.shape), [1] * index.rank,
                        list(range(index.rank)))
    return ops.scatter(x, _index(index), src, d)


@register("aten.scatter_add.default", promote=(0, 3))
def _scatter_add(ctx: Any, x: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    return _scatter_reduce(ctx, x, dim, index, src, "sum")


@register("aten.scatter_reduce.two", promote=(0, 3))
def _scatter_reduce(ctx: Any, x: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str,
                    *, include_self: bool = True) -> Tensor:
    d = _d(dim, x.rank)
    op = {"sum": "sum", "prod": "mul", "amax": "max", "amin": "min", "mean": "mean"}[reduce]
    if src.shape != index.shape:
        src = ops.slice(src, [0] * index.rank, list(index.shape), [1] * index.rank,
                        list(range(index.rank)))
    if index.shape[:d] + index.shape[d + 1:] != x.shape[:d] + x.shape[d + 1:]:
        raise Unsupported("an index smaller than self outside the scatter dim")
    idx = _index(index)
    if op == "mean":
        total = ops.scatter_reduce(src, idx, "sum", x if include_self else None, d, x.shape[d])
        ones = constant(np.ones(index.shape, x.dtype.as_numpy()))
        count = ops.scatter_reduce(ones, idx, "sum", None, d, x.shape[d])
        count = count + 1.0 if include_self else count
        touched = ops.greater(count, 0.0)
        mean = total / ops.where(touched, count, 1.0)
        return ops.where(touched, mean, x)
    reduced = ops.scatter_reduce(src, idx, op, x if include_self else None, d, x.shape[d])
    if include_self:
        return reduced
    ones = constant(np.ones(index.shape, np.int32))
    touched = ops.greater(ops.scatter_reduce(ones, idx, "sum", None, d, x.shape[d]), 0)
    return ops.where(touched, reduced, x)


@register("aten.index_put.default", promote=(0, 2))
def _index_put(ctx: Any, x: Tensor, indices: Sequence[Tensor | None], values: Tensor,
               accumulate: bool = False) -> Tensor:
    used = [i for i, t in enumerate(indices) if t is not None]
    if used != [0] or indices[0].rank != 1:
        raise Unsupported("index_put with other than one 1-D index on dim 0")
    idx = _index(indices[0])
    n = idx.shape[0]
    rows = (n,) + x.shape[1:]
    values = values if values.shape == rows else ops.expand(values, rows)
    full = ops.expand(ops.reshape(idx, (n,) + (1,) * (x.rank - 1)), rows)
    return ops.scatter_reduce(values, full, "sum" if accumulate else "none", x, 0, x.shape[0])


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


@register("aten.empty.memory_format", "aten.zeros.default", "aten.empty_strided.default")
def _zeros(ctx: Any, *args: Any, **_: Any) -> Tensor:
    return _filled(ctx, 0)


@register("aten.ones.default")
def _ones(ctx: Any, *args: Any, **_: Any) -> Tensor:
    return _filled(ctx, 1)


@register("aten.full_like.default")
def _full_like(ctx: Any, x: Tensor, fill_value: Any, **_: Any) -> Tensor:
    return _filled(ctx, fill_value)


@register("aten.fill.Scalar")
def _fill(ctx: Any, x: Tensor, value: Any) -> Tensor:
    return _filled(ctx, value)


@register("aten.arange.start_step", "aten.arange.default", "aten.arange.start")
def _arange(ctx: Any, *args: Any, **_: Any) -> Tensor:
    numbers = [a for a in args if isinstance(a, int | float)]
    val = ctx.val
    return constant(np.arange(*numbers).astype(xlgraph_dtype(val.dtype).as_numpy()))


@register("aten._assert_tensor_metadata.default", "aten._assert_scalar.default",
          "aten.sym_constrain_range_for_size.default")
def _assertion(ctx: Any, *args: Any, **kwargs: Any) -> None:
    """torch's own checks of the traced shapes and dtypes: nothing to run."""
