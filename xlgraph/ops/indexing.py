"""Indexed data movement: gather, scatter, topk, split, subsample, and ``Tensor.__getitem__``
with index or mask tensors."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import numpy as np

from xlgraph import dtypes
from xlgraph.errors import DTypeError, ShapeError, user_source_line
from xlgraph.op import OpDef, Sample, apply, apply1, explained, normalize_axes, register, same_dtype
from xlgraph.ops.loops import float_only, gather_grad_rows
from xlgraph.ops.movement import init, slice
from xlgraph.ops.split import split  # its old path
from xlgraph.tensor import Tensor, TensorSpec, constant

__all__ = ["gather", "tied_gather", "scatter", "topk", "split", "subsample"]


def check_int_indices(spec: TensorSpec, what: str = "indices") -> None:
    """Raise DTypeError unless ``spec`` holds integers."""
    if not spec.dtype.is_int:
        raise DTypeError(f"{what} must be integers, got {spec}")


def as_index_tensor(indices: Any) -> Tensor:
    """``indices`` if it is a Tensor, else an int32 constant of it."""
    if isinstance(indices, Tensor):
        return indices
    return constant(np.asarray(indices), dtypes.int32)


# -- element-wise gather and scatter (ONNX GatherElements / ScatterElements) ------------------
def _grid(indices: np.ndarray, axis: int) -> tuple[np.ndarray, ...]:
    """Fancy index selecting ``x[..., indices[i, j, ...], ...]`` at every position of indices."""
    grid = list(np.indices(indices.shape, sparse=True))
    grid[axis] = indices
    return tuple(grid)


def _elements_infer(t: TensorSpec, indices: TensorSpec, axis: int) -> TensorSpec:
    check_int_indices(indices)
    if len(indices.shape) != len(t.shape) or any(
            i > d for a, (i, d) in enumerate(zip(indices.shape, t.shape)) if a != axis):
        raise ShapeError(f"indices {indices} do not fit {t} outside axis {axis}")
    return TensorSpec(indices.shape, t.dtype)


def _scatter_add_infer(dy: TensorSpec, indices: TensorSpec, shape: tuple[int, ...],
                       axis: int) -> TensorSpec:
    check_int_indices(indices)
    return TensorSpec(shape, dy.dtype)


def _take_along_axis(x: np.ndarray, indices: np.ndarray, axis: int) -> np.ndarray:
    return x[_grid(indices, axis)]


def _scatter_add(dy: np.ndarray, indices: np.ndarray, shape: tuple[int, ...],
                 axis: int) -> np.ndarray:
    out = np.zeros(shape, dy.dtype)
    np.add.at(out, _grid(indices, axis), dy)
    return out


def _unique_columns(rng: np.random.Generator, n: int, shape: tuple[int, ...]) -> np.ndarray:
    """Indices in [0, n) of ``shape``, distinct along axis 0 (no scatter collisions)."""
    cols = int(np.prod(shape[1:], dtype=np.int64))
    picks = [rng.permutation(n)[: shape[0]] for _ in range(cols)]
    return np.stack(picks, -1).reshape(shape)


_TAKE_ALONG_AXIS = OpDef(
    "take_along_axis", _elements_infer, _take_along_axis,
    lambda g, dy: (scatter_add(dy, g.x(1), g.x(0).shape, g.attrs["axis"]), None),
    samples=lambda rng: [Sample((rng.normal(size=(5, 3)), rng.integers(-5, 5, (4, 2))),
                                {"axis": 0})],
)
_SCATTER_ADD = OpDef(
    "scatter_add", _scatter_add_infer, _scatter_add,
    lambda g, dy: (take_along_axis(dy, g.x(1), g.attrs["axis"]), None),
    samples=lambda rng: [Sample((rng.normal(size=(2, 6)), rng.integers(0, 4, (2, 6))),
                                {"shape": (3, 4), "axis": 1})],
)


@register(_TAKE_ALONG_AXIS)
def take_along_axis(t: Tensor, indices: Tensor, axis: int) -> Tensor:
    """``t`` picked at ``indices`` along ``axis`` (ONNX GatherElements); gradient of scatter."""
    return apply1(_TAKE_ALONG_AXIS, [t, indices], {"axis": normalize_axes(axis, t.rank)[0]})


@register(_SCATTER_ADD)
def scatter_add(dy: Tensor, indices: Tensor, shape: Sequence[int], axis: int) -> Tensor:
    """Zeros of ``shape`` with ``dy`` added at ``indices`` along ``axis`` (duplicates sum)."""
    attrs = {"shape": tuple(shape), "axis": normalize_axes(axis, len(shape))[0]}
    return apply1(_SCATTER_ADD, [dy, indices], attrs)


def _scatter_infer(t: TensorSpec, indices: TensorSpec, values: TensorSpec,
                   axis: int) -> TensorSpec:
    same_dtype(t, values)
    if indices.shape != values.shape:
        raise ShapeError(f"indices {indices} and values {values} must have the same shape")
    _elements_infer(t, indices, axis)
    return t


def _scatter(x: np.ndarray, indices: np.ndarray, values: np.ndarray, axis: int) -> np.ndarray:
    out = x.copy()
    out[_grid(indices, axis)] = values
    return out


def _scatter_ref(x: np.ndarray, indices: np.ndarray, values: np.ndarray, axis: int):
    out = x.copy()
    for pos in np.ndindex(*indices.shape):
        target = list(pos)
        target[axis] = indices[pos]
        out[tuple(target)] = values[pos]
    return out


def _scatter_grad(g: Any, dy: Tensor) -> tuple[Any, ...]:
    idx, axis, values = g.x(1), g.attrs["axis"], g.x(2)
    kept = scatter(dy, idx, init(values.shape, values.dtype), axis)
    return kept, None, take_along_axis(dy, idx, axis)


_SCATTER = OpDef(
    "scatter", _scatter_infer, _scatter, _scatter_grad, ref=_scatter_ref,
    samples=lambda rng: [
        Sample((rng.normal(size=(5, 3)), _unique_columns(rng, 5, (2, 3)),
                rng.normal(size=(2, 3))), {"axis": 0}),
        Sample((rng.normal(size=(3, 6)), _unique_columns(rng, 6, (4, 2)).T,
                rng.normal(size=(2, 4))), {"axis": 1}),
    ],
)


@register(_SCATTER)
def scatter(t: Tensor, indices: Any, values: Tensor, axis: int = 0,
            available_memory_proportion: float | None = None) -> Tensor:
    """A copy of ``t`` with ``values[p]`` written at position ``p`` with the axis coordinate
    replaced by ``indices[p]`` (ONNX ScatterElements). Indices may be negative; with repeated
    indices the value written is unspecified and the gradient assumes none repeat."""
    attrs = {"axis": normalize_axes(axis, t.rank)[0]}
    hints = {"available_memory_proportion": available_memory_proportion}
    return apply1(_SCATTER, [t, as_index_tensor(indices), values], attrs, hints=hints)


# -- gather (ONNX Gather) ----------------------------------------------------------------------
def _gather_infer(t: TensorSpec, indices: TensorSpec, axis: int, zero_OOR: bool) -> TensorSpec:
    check_int_indices(indices)
    return TensorSpec(t.shape[:axis] + indices.shape + t.shape[axis + 1:], t.dtype)


def _lowest(n: int, zero_OOR: bool) -> int:  # noqa: N803
    """The lowest valid index along an axis of ``n``: with ``zero_OOR`` PopART masks negative
    indices as out of range; without it xlgraph lets them count from the end (PopXL leaves
    them undefined)."""
    return 0 if zero_OOR else -n


def _gather(x: np.ndarray, indices: np.ndarray, axis: int, zero_OOR: bool) -> np.ndarray:
    """Out-of-range rows are zero whatever ``zero_OOR`` says (PopXL leaves them undefined
    without it, and does not fail)."""
    n, lo = x.shape[axis], _lowest(x.shape[axis], zero_OOR)
    if indices.size == 0 or (indices.min() >= lo and indices.max() < n):
        return np.take(x, indices, axis=axis)
    valid = (indices >= lo) & (indices < n)
    out = np.take(x, np.where(valid, indices, 0), axis=axis)
    mask = valid.reshape((1,) * axis + indices.shape + (1,) * (x.ndim - axis - 1))
    return np.where(mask, out, np.zeros((), x.dtype))


def _gather_ref(x: np.ndarray, indices: np.ndarray, axis: int, zero_OOR: bool) -> np.ndarray:
    out = np.zeros(x.shape[:axis] + indices.shape + x.shape[axis + 1:], x.dtype)
    n = x.shape[axis]
    for pos in np.ndindex(*out.shape):
        i = int(indices[pos[axis: axis + indices.ndim]])
        if _lowest(n, zero_OOR) <= i < n:
            out[pos] = x[pos[:axis] + (i,) + pos[axis + indices.ndim:]]
    return out


def _gather_grad_infer(dy: TensorSpec, indices: TensorSpec, shape: tuple[int, ...], axis: int,
                       zero_OOR: bool) -> TensorSpec:
    return TensorSpec(shape, dy.dtype)


def add_rows_at(out: np.ndarray, dy: np.ndarray, indices: np.ndarray, axis: int,
                zero_OOR: bool = False) -> None:  # noqa: N803
    """Add ``dy``, shaped like ``gather(out, indices, axis)``, back into the slices of ``out``
    it was gathered from (repeated indices accumulate; out-of-range indices are skipped, and
    negative ones too with ``zero_OOR``)."""
    n = out.shape[axis]
    flat = indices.reshape(-1)
    rows = np.moveaxis(dy.reshape(out.shape[:axis] + (flat.size,) + out.shape[axis + 1:]),
                       axis, 0)
    valid = (flat >= _lowest(n, zero_OOR)) & (flat < n)
    np.add.at(np.moveaxis(out, axis, 0), flat[valid], rows[valid])


def _gather_grad_out(dy: np.ndarray, indices: np.ndarray, out: np.ndarray,
                     shape: tuple[int, ...], axis: int, zero_OOR: bool) -> np.ndarray:
    out.fill(0)
    add_rows_at(out, dy, indices, axis, zero_OOR)
    return out


def _gather_grad(dy: np.ndarray, indices: np.ndarray, shape: tuple[int, ...], axis: int,
                 zero_OOR: bool) -> np.ndarray:
    return _gather_grad_out(dy, indices, np.empty(shape, dy.dtype), shape, axis, zero_OOR)


def _gather_grad_loop(ins: list[TensorSpec], shape: tuple[int, ...], axis: int,
                      zero_OOR: bool) -> Any:
    """Rows along axis 0 (an embedding's gradient), float data."""
    if axis != 0 or not ins[1].dtype.is_int:
        return None
    return float_only(ins[0], gather_grad_rows, ints=(int(zero_OOR),))


_GATHER_GRAD = OpDef(
    "gather_grad", _gather_grad_infer, _gather_grad,
    lambda g, dy: (gather(dy, g.x(1), g.attrs["axis"], zero_OOR=g.attrs["zero_OOR"]), None),
    kernel_out=_gather_grad_out, loop=_gather_grad_loop,
    samples=lambda rng: [Sample((rng.normal(size=(2, 3)), rng.integers(0, 4, (2,))),
                                {"shape": (2, 4), "axis": 1, "zero_OOR": False}),
                         Sample((rng.normal(size=(6, 3)), np.array([1, -2, 1, 7, 0, -9])),
                                {"shape": (4, 3), "axis": 0, "zero_OOR": False}),
                         Sample((rng.normal(size=(6, 3)), np.array([1, -2, 1, 7, 0, -9])),
                                {"shape": (4, 3), "axis": 0, "zero_OOR": True})],
    widen_half=True, c_contiguous=True,  # np.empty's C order
)


def _gather_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample((rng.normal(size=(5, 4)), rng.integers(0, 5, (3,)))),
            Sample((rng.normal(size=(2, 6, 3)), rng.integers(-6, 6, (2, 4))), {"axis": 1}),
            Sample((rng.normal(size=(4, 3)), np.array([0, 5, -1, -7, 3])),
                   {"axis": 0, "zero_OOR": True}),
            Sample((rng.normal(size=(3, 4)), np.array([[1, 9], [-5, 0]])), {"axis": 1})]


_GATHER = OpDef(
    "gather", _gather_infer, _gather,
    lambda g, dy: (apply1(_GATHER_GRAD, [dy, g.x(1)], {"shape": g.x(0).shape, **g.attrs}),
                   None),
    ref=_gather_ref, samples=_gather_samples, c_contiguous=True,  # np.take's, np.where's
)


@register(_GATHER)
def gather(t: Tensor, indices: Any, axis: int = 0, available_memory_proportion: float | None = None,
           zero_OOR: bool = False) -> Tensor:  # noqa: N803
    """Take the slices of ``t`` at ``indices`` along ``axis`` (ONNX Gather, like ``np.take``).

    The output shape is ``t.shape[:axis] + indices.shape + t.shape[axis+1:]``. With
    ``zero_OOR=True`` valid indices are in ``[0, n)`` and every other one, negative ones
    included, gives a row of zeros whose gradient is dropped (as PopART masks them: a
    vocabulary-sharded embedding gathers ``ids - offset``). Without it PopXL leaves
    out-of-range rows undefined (without failing); xlgraph lets indices in ``[-n, 0)`` count
    from the end and zeroes the rest. Repeated indices accumulate their gradients.
    ``available_memory_proportion`` is recorded in ``op.hints`` for the ipu_model.
    """
    attrs = {"axis": normalize_axes(axis, t.rank)[0], "zero_OOR": bool(zero_OOR)}
    hints = {"available_memory_proportion": available_memory_proportion}
    return apply1(_GATHER, [t, as_index_tensor(indices)], attrs, hints=hints)


@explained("tied_gather")
def tied_gather(t: Tensor, indices: Any, axis: int = 0,
                available_memory_proportion: float | None = None,
                zero_OOR: bool = False) -> Tensor:  # noqa: N803
    """``gather`` for a weight shared with a matmul (tied embeddings); PopXL only changes the
    device layout of its gradient, so the values and gradients equal ``gather``'s."""
    return gather(t, indices, axis, available_memory_proportion, zero_OOR)


# -- topk --------------------------------------------------------------------------------------
def _topk_infer(t: TensorSpec, k: int, axis: int, largest: bool,
                sorted: bool) -> tuple[TensorSpec, TensorSpec]:  # noqa: A002
    if not 0 < k <= t.shape[axis]:
        raise ShapeError(f"k={k} must be in [1, {t.shape[axis]}] for axis {axis} of {t}")
    shape = tuple(k if i == axis else d for i, d in enumerate(t.shape))
    return TensorSpec(shape, t.dtype), TensorSpec(shape, dtypes.int32)


def _topk(x: np.ndarray, k: int, axis: int, largest: bool,
          sorted: bool) -> tuple[np.ndarray, np.ndarray]:  # noqa: A002
    """Ties keep the lower index first; the result is always sorted."""
    if largest:  # a stable descending sort: sort the flipped axis, flip back, re-index
        n = x.shape[axis]
        order = n - 1 - np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, idx, axis=axis), idx.astype(np.int32)


def _topk_ref(x: np.ndarray, k: int, axis: int, largest: bool,
              sorted: bool) -> tuple[np.ndarray, np.ndarray]:  # noqa: A002
    """Selection with Python loops: repeatedly pick the best remaining element of each row."""
    rows = np.moveaxis(x, axis, -1).reshape(-1, x.shape[axis])
    vals = np.zeros((rows.shape[0], k), x.dtype)
    idxs = np.zeros((rows.shape[0], k), np.int32)
    for r, row in enumerate(rows):
        left = list(range(len(row)))
        for j in range(k):
            best = left[0]
            for i in left[1:]:
                if (row[i] > row[best]) if largest else (row[i] < row[best]):
                    best = i
            left.remove(best)
            vals[r, j], idxs[r, j] = row[best], best
    shape = np.moveaxis(x, axis, -1).shape[:-1] + (k,)
    return (np.moveaxis(vals.reshape(shape), -1, axis),
            np.moveaxis(idxs.reshape(shape), -1, axis))


def _topk_grad(g: Any, dy: Tensor | None, _: Any) -> tuple[Tensor | None]:
    if dy is None:
        return (None,)
    return (scatter_add(dy, g.y(1), g.x(0).shape, g.attrs["axis"]),)


_TOPK = OpDef(
    "topk", _topk_infer, _topk, _topk_grad, ref=_topk_ref,
    samples=lambda rng: [
        Sample((rng.normal(size=(4, 6)),), {"k": 3, "axis": 1}),
        Sample((rng.normal(size=(5, 2, 3)),), {"k": 2, "axis": 0, "largest": False}),
        Sample((rng.integers(0, 3, (3, 8)),), {"k": 4, "axis": -1}, grad=False),
    ],
)


@register(_TOPK)
def topk(t: Tensor, k: int, axis: int, largest: bool = True, sorted: bool = True,  # noqa: A002
         available_memory_proportion: float | None = None) -> tuple[Tensor, Tensor]:
    """The ``k`` largest (or smallest) values of ``t`` along ``axis`` and their int32 indices.

    Results are always sorted (also with ``sorted=False``); ties keep the lower index first.
    """
    attrs = {"k": int(k), "axis": normalize_axes(axis, t.rank)[0], "largest": bool(largest),
             "sorted": bool(sorted)}
    hints = {"available_memory_proportion": available_memory_proportion}
    values, indices = apply(_TOPK, [t], attrs, hints=hints)
    return values, indices


# -- subsample (a view built from slice) -------------------------------------------------
@explained("subsample")
def subsample(t: Tensor, strides: Sequence[int] | int) -> Tensor:
    """Every ``strides[d]``-th element along each axis ``d``, starting from the first. As in
    PopXL an int is ``[int]`` and a list shorter than the rank is padded with 1s at the end
    (``[2]`` on a 2-D tensor is ``[2, 1]``); a longer one raises ``ValueError``."""
    if isinstance(strides, int | np.integer):
        strides = [int(strides)]
    strides = [int(s) for s in strides]
    if len(strides) > t.rank or builtins.min(strides, default=1) < 1:
        raise ShapeError(f"subsample: need at most one stride >= 1 per axis of {t.id} "
                         f"{t.spec}, got {strides} [at {user_source_line()}]")
    strides += [1] * (t.rank - len(strides))
    return slice(t, step=strides, axis=list(range(t.rank)))
