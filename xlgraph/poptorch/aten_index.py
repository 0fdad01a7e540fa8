"""Conversions of ATen's advanced indexing: ``aten.index.Tensor`` (``x[i, :, j]``) and
``aten.index_put`` (``x[i, j] = v``, ``x[i] += v`` with ``accumulate``, ``x[mask] = v``).

Integer index tensors follow torch's rules: they broadcast together, negative entries count
from the end, and ``None`` (a full slice) may stand between them. When the indexed dims are
adjacent, the broadcast index dims replace them in place; otherwise they come first. Both ops
reduce to one ``gather`` (or ``scatter``) on axis 0 of ``x`` with its indexed dims moved to the
front and merged, so each has its gradient from those ops.

A boolean mask ``x[..., mask, ...]`` selects a number of elements only the data knows. Reading
one is refused by ``xlgraph.poptorch.masks`` (outside the in-place lanes it handles); assigning
through one (``x[mask] = v``, ``x[:, mask] += v``) keeps every element: ``where(mask, v, x)``.
A ``uint8`` index tensor is a mask too (torch's deprecated rule): its non-zero entries select.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from xlgraph import dtypes, ops
from xlgraph.op import broadcast_shapes
from xlgraph.poptorch.support import Error
from xlgraph.poptorch.table import register
from xlgraph.poptorch.util import Unsupported, dims
from xlgraph.tensor import Tensor

__all__ = ["Layout"]


def _as_index(t: Tensor, size: int) -> Tensor:
    """``t`` as int32 positions in a dim of ``size``, negative entries counted from the end."""
    t = t if t.dtype == dtypes.int32 else ops.cast(t, dtypes.int32)
    return ops.where(ops.less(t, 0), t + size, t)


@dataclass(frozen=True)
class Layout:
    """Where ``x[indices]``'s dims come from.

    Attributes:
        used: the dims of ``x`` that index tensors address, in order.
        rest: the other dims of ``x``, in order.
        index_shape: the broadcast shape of the index tensors.
        at: where the index dims sit in the result (the first used dim when the used dims
            are adjacent, else 0).
    """

    used: tuple[int, ...]
    rest: tuple[int, ...]
    index_shape: tuple[int, ...]
    at: int

    @classmethod
    def of(cls, rank: int, indices: Sequence[Tensor | None]) -> Layout:
        used = tuple(i for i, t in enumerate(indices) if t is not None)
        rest = tuple(d for d in range(rank) if d not in used)
        shape = broadcast_shapes(*(indices[i].shape for i in used))
        adjacent = used == tuple(range(used[0], used[-1] + 1))
        return cls(used, rest, tuple(shape), used[0] if adjacent else 0)

    def front(self, x: Tensor) -> Tensor:
        """``x`` with its used dims moved to the front and merged into one."""
        perm = list(self.used + self.rest)
        moved = ops.transpose(x, perm) if perm != list(range(x.rank)) else x
        merged = math.prod(x.shape[d] for d in self.used)
        return ops.reshape(moved, (merged,) + tuple(x.shape[d] for d in self.rest))

    def back(self, front: Tensor, shape: tuple[int, ...]) -> Tensor:
        """The inverse of ``front``: a tensor of ``x``'s ``shape`` again."""
        perm = list(self.used + self.rest)
        moved = ops.reshape(front, tuple(shape[d] for d in perm))
        return ops.transpose(moved, list(np.argsort(perm))) if perm != sorted(perm) else moved

    def result_perm(self) -> list[int]:
        """From ``(index dims, rest dims)`` to torch's result order."""
        n = len(self.index_shape)
        return [n + k for k in range(self.at)] + list(range(n)) + [
            n + k for k in range(self.at, len(self.rest))]

    def flat_index(self, x: Tensor, indices: Sequence[Tensor | None]) -> Tensor:
        """The position in ``front(x)``'s first dim that each index element addresses."""
        flat = None
        for d in self.used:
            idx = _as_index(indices[d], x.shape[d])
            idx = idx if idx.shape == self.index_shape else ops.expand(idx, self.index_shape)
            flat = idx if flat is None else flat * x.shape[d] + idx
        return flat


def _masks_as_bool(indices: Sequence[Tensor | None]) -> list[Tensor | None]:
    """``indices`` with each ``uint8`` index tensor made the boolean mask torch reads it as
    (non-zero selects, as ``mask.bool()``)."""
    return [ops.not_equal(t, 0) if t is not None and t.dtype == dtypes.uint8 else t
            for t in indices]


@register("aten.index.Tensor")
def _index_tensor(ctx: Any, x: Tensor, indices: Sequence[Tensor | None]) -> Tensor:
    """``x[indices]`` with integer index tensors (boolean and ``uint8`` masks are handled by
    ``xlgraph.poptorch.masks`` before conversion, or refused there)."""
    if any(t is not None and t.dtype in (dtypes.bool, dtypes.uint8) for t in indices):
        raise Unsupported("reading through a boolean mask (its result shape depends on the data)")
    layout = Layout.of(x.rank, indices)
    out = ops.gather(layout.front(x), layout.flat_index(x, indices), 0)
    perm = layout.result_perm()
    return ops.transpose(out, perm) if perm != sorted(perm) else out


@register("aten.index_put.default", promote=(0, 2))
def _index_put(ctx: Any, x: Tensor, indices: Sequence[Tensor | None], values: Tensor,
               accumulate: bool = False) -> Tensor:
    """``x[indices] = values`` (``+=`` with ``accumulate``): ``values`` broadcasts to the shape
    of ``x[indices]``; with ``accumulate`` repeated indices add up, as in torch."""
    indices = _masks_as_bool(indices)
    masks = [t for t in indices if t is not None and t.dtype == dtypes.bool]
    if masks:
        return _masked_put(x, indices, values, accumulate)
    layout = Layout.of(x.rank, indices)
    front = layout.front(x)
    perm = layout.result_perm()
    selected = tuple((layout.index_shape + front.shape[1:])[p] for p in perm)
    values = values if values.shape == selected else ops.expand(values, selected)
    if perm != sorted(perm):
        values = ops.transpose(values, list(np.argsort(perm)))
    n = math.prod(layout.index_shape)
    rows = (n,) + front.shape[1:]
    values = ops.reshape(values, rows)
    flat = ops.reshape(layout.flat_index(x, indices), (n,) + (1,) * (x.rank - len(layout.used)))
    targets = ops.expand(flat, rows) if flat.shape != rows else flat
    if accumulate:
        out = ops.scatter_reduce(values, targets, "sum", front, 0, front.shape[0])
    else:
        out = ops.scatter(front, targets, values, 0)
    return layout.back(out, x.shape)


def _masked_put(x: Tensor, indices: Sequence[Tensor | None], values: Tensor,
                accumulate: bool) -> Tensor:
    """``x[..., mask, ...] = values`` with one boolean mask: ``values`` holds every lane of
    ``x`` (``x[mask] *= 2``, see ``xlgraph.poptorch.masks``) or broadcasts to one selected
    element (``x[mask] = 0``, ``x[:, mask] = row``)."""
    used = [i for i, t in enumerate(indices) if t is not None]
    if len(used) != 1:
        raise Unsupported("index_put with a boolean mask beside other index tensors")
    at, mask = used[0], indices[used[0]]
    after = x.shape[at + mask.rank:]
    keep = ops.reshape(mask, (1,) * at + mask.shape + (1,) * len(after))
    if values.shape != x.shape:
        # x[mask] has shape x.shape[:at] + (count,) + after; values broadcast to it with the
        # count dim 1 (any other count is a shape only the data decides)
        rank = at + 1 + len(after)
        padded = (1,) * (rank - values.rank) + values.shape
        if values.rank > rank or padded[at] != 1:
            raise Unsupported(f"x[mask] = values with values of shape {values.shape}: the "
                              f"number of selected elements depends on the data")
        values = ops.reshape(values, padded[:at] + (1,) * mask.rank + padded[at + 1:])
    if accumulate:
        return x + ops.where(keep, values, 0)
    out = ops.where(keep, values, x)
    return out if out.shape == x.shape else ops.expand(out, x.shape)


@register("aten.slice_scatter.default")
def _slice_scatter(ctx: Any, x: Tensor, src: Tensor, dim: int = 0, start: Any = None,
                   end: Any = None, step: int = 1) -> Tensor:
    """``x`` with its slice ``start:end`` of ``dim`` replaced by ``src`` (what assigning to or
    changing in place a basic slice becomes). As PopTorch, only step 1 can be written."""
    if step != 1:
        raise Error("In-place modification of slices with step size other than 1 is not "
                    "supported.")
    d = dims(dim, x.rank)[0]
    lo, hi, _ = slice(start, end, 1).indices(x.shape[d])
    hi = max(hi, lo)
    src = src if src.dtype == x.dtype else ops.cast(src, x.dtype)
    parts = [ops.slice(x, [0], [lo], [1], [d])] if lo > 0 else []
    parts.append(src)
    if hi < x.shape[d]:
        parts.append(ops.slice(x, [hi], [x.shape[d]], [1], [d]))
    return parts[0] if len(parts) == 1 else ops.concat(parts, d)

