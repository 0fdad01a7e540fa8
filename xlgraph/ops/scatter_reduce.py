"""Index-driven ops PopXL adds beyond ONNX: ``scatter_reduce``, ``groupedgather`` and
``histogram``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from xlgraph import dtypes
from xlgraph.errors import AutodiffError, DTypeError, ShapeError
from xlgraph.op import OpDef, Sample, apply1, explained, normalize_axes, register, same_dtype
from xlgraph.ops.indexing import _grid, as_index_tensor, check_int_indices, gather, take_along_axis
from xlgraph.tensor import Tensor, TensorSpec

__all__ = ["scatter_reduce", "groupedgather", "histogram"]

REDUCTIONS = ("sum", "max", "min", "mul", "none")
_UFUNCS = {"sum": np.add, "max": np.maximum, "min": np.minimum, "mul": np.multiply}


# -- scatter_reduce ----------------------------------------------------------------------------
def _scatter_reduce_infer(data: TensorSpec, indices: TensorSpec, *initial: TensorSpec,
                          reduction: str, axis: int, axis_size: int) -> TensorSpec:
    check_int_indices(indices)
    if indices.shape != data.shape and indices.shape != (data.shape[axis],):
        raise ShapeError(f"indices {indices} must match data {data} (or be 1-D along the axis)")
    shape = data.shape[:axis] + (axis_size,) + data.shape[axis + 1:]
    if initial:
        same_dtype(data, initial[0])
        if initial[0].shape != shape:
            raise ShapeError(f"initial_values {initial[0]} must have the output shape {shape}")
    return TensorSpec(shape, data.dtype)


def _full(indices: np.ndarray, shape: tuple[int, ...], axis: int) -> np.ndarray:
    """Indices broadcast to ``shape`` when given 1-D along ``axis``."""
    if indices.shape == shape:
        return indices
    return np.broadcast_to(indices.reshape([-1 if i == axis else 1 for i in range(len(shape))]),
                           shape)


def _scatter_reduce(data: np.ndarray, indices: np.ndarray, *initial: np.ndarray, reduction: str,
                    axis: int, axis_size: int) -> np.ndarray:
    shape = data.shape[:axis] + (axis_size,) + data.shape[axis + 1:]
    where = _grid(_full(indices, data.shape, axis), axis)
    touched = np.zeros(shape, bool)
    touched[where] = True
    if reduction == "none":
        out = initial[0].copy() if initial else np.zeros(shape, data.dtype)
        out[where] = data
        return out
    ufunc = _UFUNCS[reduction]
    out = np.full(shape, ufunc.identity if ufunc.identity is not None else 0, data.dtype)
    if reduction in ("max", "min"):
        info = np.finfo(data.dtype) if data.dtype.kind == "f" else np.iinfo(data.dtype)
        out.fill(info.min if reduction == "max" else info.max)
    ufunc.at(out, where, data)
    if initial:
        return np.where(touched, ufunc(out, initial[0]), initial[0])
    return np.where(touched, out, np.zeros((), data.dtype))


def _scatter_reduce_ref(data: np.ndarray, indices: np.ndarray, *initial: np.ndarray,
                        reduction: str, axis: int, axis_size: int) -> np.ndarray:
    """One element at a time with Python's own min/max/sum/product."""
    shape = data.shape[:axis] + (axis_size,) + data.shape[axis + 1:]
    indices = _full(indices, data.shape, axis)
    groups: dict[tuple[int, ...], list[Any]] = {}
    for pos in np.ndindex(*data.shape):
        target = list(pos)
        target[axis] = int(indices[pos]) % axis_size
        groups.setdefault(tuple(target), []).append(data[pos])
    out = initial[0].copy() if initial else np.zeros(shape, data.dtype)
    combine = {"sum": sum, "max": max, "min": min, "mul": np.prod, "none": lambda v: v[-1]}
    for target, values in groups.items():
        if initial and reduction != "none":
            values = [initial[0][target], *values]
        out[target] = combine[reduction](values)
    return out


def _scatter_reduce_grad(g: Any, dy: Tensor) -> tuple[Any, ...]:
    from xlgraph.ops.elementwise import cast, equal

    reduction, axis = g.attrs["reduction"], g.attrs["axis"]
    if reduction not in ("sum", "max", "min", "mul"):
        raise AutodiffError(f"scatter_reduce with reduction={reduction!r} has no gradient; "
                            f"'sum', 'max', 'min' and 'mul' do")
    data, idx = g.x(0), g.x(1)
    if idx.shape != data.shape:
        from xlgraph.ops.movement import expand, reshape

        idx = expand(reshape(idx, tuple(-1 if i == axis else 1 for i in range(data.rank))),
                     data.shape)
    if reduction == "mul":
        return _product_grad(g, dy, idx)
    d_data = take_along_axis(dy, idx, axis)
    d_initial = dy
    if reduction != "sum":  # the gradient goes to the inputs equal to the result
        y = g.y(0)
        d_data = d_data * cast(equal(data, take_along_axis(y, idx, axis)), dy.dtype)
        if len(g.op.inputs) > 2:
            d_initial = dy * cast(equal(g.x(2), y), dy.dtype)
    return (d_data, None, d_initial)[: len(g.op.inputs)]


def _product_grad(g: Any, dy: Tensor, idx: Tensor) -> tuple[Any, ...]:
    """'mul': each factor gets ``dy`` times the product of the other factors of its output
    (the initial value is one of them), computed without dividing by zero: with the zero
    factors counted apart, a zero factor gets the product of the rest when it is the only
    zero, and every factor gets 0 when two or more are zero."""
    from xlgraph.ops.elementwise import cast, equal, where

    axis, size = g.attrs["axis"], g.attrs["axis_size"]
    data = g.x(0)
    factors = [data] + ([g.x(2)] if len(g.op.inputs) > 2 else [])
    zeros = [equal(f, 0.0) for f in factors]
    safe = [where(z, 1.0, f) for z, f in zip(zeros, factors)]
    counts = [cast(z, data.dtype) for z in zeros]
    nonzero = scatter_reduce(safe[0], idx, "mul", *safe[1:], axis=axis, axis_size=size)
    count = scatter_reduce(counts[0], idx, "sum", *counts[1:], axis=axis, axis_size=size)

    def others(zero: Tensor, value: Tensor, product: Tensor, n: Tensor) -> Tensor:
        return where(zero, where(equal(n, 1.0), product, 0.0),
                     where(equal(n, 0.0), product / value, 0.0))

    d_data = take_along_axis(dy, idx, axis) * others(
        zeros[0], safe[0], take_along_axis(nonzero, idx, axis), take_along_axis(count, idx, axis))
    if len(factors) == 1:
        return d_data, None
    return d_data, None, dy * others(zeros[1], safe[1], nonzero, count)


def _scatter_reduce_samples(rng: np.random.Generator) -> list[Sample]:
    data, idx = rng.normal(size=(6, 3)), rng.integers(0, 4, (6, 3))
    row_idx = rng.integers(-5, 5, (4,))
    return [
        Sample((data, idx, "sum"), {"axis_size": 4}),
        Sample((data, idx, "max", rng.normal(size=(4, 3))), {"axis_size": 4}),
        Sample((data, idx, "min"), {"axis_size": 4}),
        Sample((rng.normal(size=(2, 4)), row_idx, "sum", rng.normal(size=(2, 5))),
               {"axis": 1, "axis_size": 5}),
        Sample((rng.uniform(0.5, 2, (5, 2)), rng.integers(0, 3, (5, 2)), "mul"),
               {"axis_size": 3}),
        # zero factors: one alone in its output, two together, and a zero initial value
        Sample((np.array([[0.0, 1.5], [2.0, 0.0], [0.0, -1.2], [0.7, 0.0], [1.1, 0.9]]),
                np.array([[0, 1], [0, 1], [2, 1], [2, 0], [1, 2]]), "mul",
                np.array([[1.3, -0.8], [0.0, 2.0], [1.4, 0.6]])), {"axis_size": 3}),
        Sample((data, np.stack([rng.permutation(6) for _ in range(3)], 1), "none"),
               {"axis_size": 6}, grad=False),
    ]


_SCATTER_REDUCE = OpDef("scatter_reduce", _scatter_reduce_infer, _scatter_reduce,
                        _scatter_reduce_grad, ref=_scatter_reduce_ref,
                        samples=_scatter_reduce_samples)


@register(_SCATTER_REDUCE)
def scatter_reduce(data: Tensor, indices: Any, reduction: str,
                   initial_values: Tensor | None = None, axis: int = 0,
                   axis_size: int | None = None, enable_index_broadcast: bool = True,
                   available_memory_proportion: float | None = None) -> Tensor:
    """Reduce the slices of ``data`` into an output whose ``axis`` has ``axis_size`` entries:
    ``data[p]`` goes to the output position ``p`` with the axis coordinate replaced by
    ``indices[p]``, combined by ``reduction`` ('sum', 'max', 'min', 'mul', or 'none': the last
    one written wins).

    ``indices`` has ``data``'s shape, or is 1-D along ``axis`` and broadcast over the other
    dims (``enable_index_broadcast``). Output positions nothing is scattered to hold
    ``initial_values`` when given, else zero; given ``initial_values`` also take part in the
    reduction where values arrive. ``axis_size`` defaults to ``data.shape[axis]``.
    Gradients exist for 'sum', 'max', 'min' (ties all receive the gradient) and 'mul'.
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"scatter_reduce: reduction must be one of {REDUCTIONS}, "
                         f"got {reduction!r}")
    axis = normalize_axes(axis, data.rank)[0]
    idx = as_index_tensor(indices)
    if idx.shape != data.shape and not enable_index_broadcast:
        raise ShapeError(f"scatter_reduce: indices {idx.spec} for data {data.spec} need "
                         f"enable_index_broadcast=True")
    attrs = {"reduction": reduction, "axis": axis,
             "axis_size": int(data.shape[axis] if axis_size is None else axis_size)}
    inputs = [data, idx] + ([initial_values] if initial_values is not None else [])
    hints = {"available_memory_proportion": available_memory_proportion}
    return apply1(_SCATTER_REDUCE, inputs, attrs, hints=hints)


# -- groupedgather -----------------------------------------------------------------------------
@explained("groupedgather")
def groupedgather(t: Tensor, indices: Any, axis: int = 0, group_size: int = 1,
                  available_memory_proportion: float | None = None,
                  zero_OOR: bool = False) -> Tensor:  # noqa: N803
    """``gather`` done separately for each of ``group_size`` groups: dim 0 of ``t`` and of
    ``indices`` is the group, and ``out[g] = gather(t[g], indices[g], axis)`` (``axis`` counts
    the dims of one group's slice). Out-of-range indices give zeros, as for ``gather``.

    Built from one gather per group, so it is differentiable like ``gather``.
    """
    from xlgraph.ops.movement import concat, reshape

    idx = as_index_tensor(indices)
    if t.rank < 2 or idx.rank < 1 or t.shape[0] != group_size or idx.shape[0] != group_size:
        raise ShapeError(f"groupedgather: data {t.id} {t.spec} and indices {idx.spec} need a "
                         f"leading group dim of size group_size={group_size}")
    parts = []
    for g in range(group_size):
        part = gather(t[g], idx[g], axis, available_memory_proportion, zero_OOR)
        parts.append(reshape(part, (1, *part.shape)))
    return parts[0] if group_size == 1 else concat(parts, 0)


# -- histogram ---------------------------------------------------------------------------------
def _histogram_infer(t: TensorSpec, levels: tuple[float, ...],
                     absolute_of_input: bool) -> TensorSpec:
    if not t.dtype.is_floating_point:
        raise DTypeError(f"histogram needs float data, got {t}")
    return TensorSpec((len(levels) + 1,), dtypes.uint32)


def _histogram(x: np.ndarray, levels: tuple[float, ...], absolute_of_input: bool) -> np.ndarray:
    values = np.abs(x) if absolute_of_input else x
    bins = np.searchsorted(np.asarray(levels, x.dtype), values.ravel(), side="right")
    return np.bincount(bins, minlength=len(levels) + 1).astype(np.uint32)


def _histogram_ref(x: np.ndarray, levels: tuple[float, ...],
                   absolute_of_input: bool) -> np.ndarray:
    counts = [0] * (len(levels) + 1)
    for v in x.ravel():
        v = abs(v) if absolute_of_input else v
        counts[sum(1 for lv in levels if v >= x.dtype.type(lv))] += 1
    return np.array(counts, np.uint32)


_HISTOGRAM = OpDef(
    "histogram", _histogram_infer, _histogram, ref=_histogram_ref,
    samples=lambda rng: [Sample((rng.normal(size=(5, 7)), [-1.0, 0.0, 0.5, 1.0], False)),
                         Sample((rng.normal(size=(40,)), [0.25, 1.0], True)),
                         Sample((np.array([0.0, 1.0, 1.0, 2.0, 3.0]), [1.0, 2.0], False))],
)


@register(_HISTOGRAM)
def histogram(t: Tensor, levels: Sequence[float], absolute_of_input: bool) -> Tensor:
    """Count the elements of ``t`` (or of ``|t|``) in the bins ``(-inf, l0), [l0, l1), ...,
    [l_last, inf)`` of the ascending ``levels``; uint32 counts of shape ``(len(levels) + 1,)``.
    """
    levels = tuple(float(v) for v in levels)
    if list(levels) != sorted(levels):
        raise ValueError(f"histogram: levels must be ascending, got {list(levels)}")
    return apply1(_HISTOGRAM, [t], {"levels": levels, "absolute_of_input": bool(absolute_of_input)})
