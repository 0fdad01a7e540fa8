"""Conversions of the remaining layer ops: GLU, resizing, the bilinear product, RReLU and
EmbeddingBag."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from xlgraph import dtypes, ops
from xlgraph.poptorch.support import Error
from xlgraph.poptorch.table import register
from xlgraph.poptorch.util import dims
from xlgraph.tensor import Tensor, constant


@register("aten.glu.default", promote=True)
def _glu(ctx: Any, x: Tensor, dim: int = -1) -> Tensor:
    a, b = ops.split(x, 2, dims(dim, x.rank)[0])
    return a * ops.sigmoid(b)


def _linear_weights(n_in: int, n_out: int, align_corners: bool, scale: Any) -> np.ndarray:
    """The (n_out, n_in) matrix of torch's linear interpolation along one axis."""
    out = np.arange(n_out, dtype=np.float64)
    if align_corners:
        src = out * ((n_in - 1) / (n_out - 1)) if n_out > 1 else out * 0.0
    else:
        ratio = 1.0 / scale if scale else n_in / n_out
        src = np.maximum((out + 0.5) * ratio - 0.5, 0.0)
    low = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    high = np.minimum(low + 1, n_in - 1)
    frac = src - low
    w = np.zeros((n_out, n_in))
    np.add.at(w, (np.arange(n_out), low), 1.0 - frac)
    np.add.at(w, (np.arange(n_out), high), frac)
    return w


def _resize(x: Tensor, matrices: Sequence[np.ndarray]) -> Tensor:
    """Apply one interpolation matrix per trailing axis (a matmul each, so it differentiates)."""
    n = len(matrices)
    for i, w in enumerate(matrices):
        axis = x.rank - n + i
        perm = [a for a in range(x.rank) if a != axis] + [axis]
        moved = ops.transpose(x, perm)
        y = ops.matmul(moved, constant(w.T.astype(x.dtype.as_numpy())))
        x = ops.transpose(y, list(np.argsort(perm)))
    return x


@register("aten.upsample_linear1d.default", "aten.upsample_trilinear3d.default",
          "aten.upsample_linear1d.vec", "aten.upsample_trilinear3d.vec")
def _upsample_refused(ctx: Any, *args: Any) -> Tensor:
    """PopTorch refuses the linear modes other than bilinear (``linear``, ``trilinear``)."""
    raise Error(f"Unsupported upsample mode {ctx.node.target._schema.name}: currently only "
                f"'nearest' is supported")


@register("aten.upsample_bilinear2d.default", "aten.upsample_bilinear2d.vec")
def _upsample_linear(ctx: Any, x: Tensor, output_size: Any, align_corners: bool,
                     *scales: Any) -> Tensor:
    out = tuple(int(s) for s in ctx.val.shape[2:])
    scales = [s for s in scales if s is not None]
    flat = scales[0] if scales and isinstance(scales[0], list | tuple) else scales
    per_axis = list(flat) + [None] * (len(out) - len(flat))
    return _resize(x, [_linear_weights(x.shape[2 + i], o, align_corners, per_axis[i])
                       for i, o in enumerate(out)])


@register("aten._trilinear.default", promote=(0, 1, 2))
def _trilinear(ctx: Any, i1: Tensor, i2: Tensor, i3: Tensor, expand1: Sequence[int],
               expand2: Sequence[int], expand3: Sequence[int], sumdim: Sequence[int],
               unroll_dim: int = 1) -> Tensor:
    """Each input with size-1 dims inserted at its ``expand`` positions, multiplied, summed."""
    def spread(t: Tensor, expand: Sequence[int]) -> Tensor:
        shape = list(t.shape)
        for d in sorted(expand):
            shape.insert(d, 1)
        return ops.reshape(t, tuple(shape))

    product = spread(i1, expand1) * spread(i2, expand2) * spread(i3, expand3)
    return ops.sum(product, tuple(sumdim)) if sumdim else product


@register("aten.rrelu_with_noise.default", "aten.rrelu_with_noise_functional.default",
          promote=(0,))
def _rrelu(ctx: Any, x: Tensor, noise: Any, lower: float = 1 / 8, upper: float = 1 / 3,
           training: bool = False, generator: Any = None) -> Any:
    if training and ctx.training:
        slope = ops.random_uniform(ctx.next_seed(), x.shape, lower, upper, x.dtype)
    else:
        slope = (lower + upper) / 2
    y = ops.where(ops.greater(x, 0.0), x, x * slope)
    return (y, noise) if "functional" in str(ctx.node.target) else y


@register("aten._embedding_bag_forward_only.default", "aten._embedding_bag.default")
def _embedding_bag(ctx: Any, weight: Tensor, indices: Tensor, offsets: Tensor,
                   scale_grad_by_freq: bool = False, mode: int = 0, sparse: bool = False,
                   per_sample_weights: Any = None, include_last_offset: bool = False,
                   padding_idx: int = -1) -> tuple[Any, ...]:
    """Bags given by ``offsets`` (any lengths, empty bags too; a 2-D input has equal ones):
    a (bags, n) membership matrix from the offsets, then a matmul (sum, mean) or a masked
    max. Entries equal to ``padding_idx`` are left out, an empty bag gives zeros."""
    n, bags = indices.shape[0], ctx.val[0].shape[0]
    idx = ops.cast(indices, dtypes.int32)
    rows = ops.gather(weight, idx, 0)
    if per_sample_weights is not None:
        rows = rows * ops.reshape(per_sample_weights, (n, 1))
    starts = ops.cast(offsets, dtypes.int32)
    ends = ops.slice(starts, 1, bags + 1, axis=0) if include_last_offset else ops.concat(
        [ops.slice(starts, 1, bags, axis=0), constant(np.array([n], np.int32))], 0)
    starts = ops.reshape(ops.slice(starts, 0, bags, axis=0), (bags, 1))
    pos = constant(np.arange(n, dtype=np.int32).reshape(1, n))
    member = ops.logical_and(ops.greater_equal(pos, starts),
                             ops.less(pos, ops.reshape(ends, (bags, 1))))
    if padding_idx is not None and padding_idx >= 0:
        member = ops.logical_and(member, ops.reshape(ops.not_equal(idx, padding_idx), (1, n)))
    count = ops.sum(ops.cast(member, rows.dtype), 1, keepdims=True)
    if mode == 2:
        picked = ops.where(ops.reshape(member, (bags, n, 1)), ops.reshape(rows, (1,) + rows.shape),
                           float("-inf"))
        return ops.where(ops.greater(count, 0.0), ops.max(picked, 1), 0.0), None, None, None
    total = ops.matmul(ops.cast(member, rows.dtype), rows)
    if mode == 1:
        total = total / ops.where(ops.greater(count, 0.0), count, 1.0)
    return total, None, None, None
