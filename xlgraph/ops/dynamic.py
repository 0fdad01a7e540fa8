"""Dynamic slices and updates: regions whose offsets are tensors read at run time."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from xlgraph.errors import ShapeError
from xlgraph.layout import region_layout
from xlgraph.op import OpDef, Sample, apply1, normalize_axes, register, same_dtype
from xlgraph.ops.indexing import as_index_tensor, check_int_indices
from xlgraph.ops.movement import init
from xlgraph.tensor import Tensor, TensorSpec

__all__ = ["dynamic_slice", "dynamic_update", "dynamic_update_"]


def _region(x_shape: tuple[int, ...], index: np.ndarray, axes: tuple[int, ...],
            sizes: tuple[int, ...]) -> tuple[slice, ...]:
    """The slice at run-time offsets ``index``, clamped so the region fits (as XLA does)."""
    region = [slice(None)] * len(x_shape)
    for a, start, size in zip(axes, np.asarray(index).reshape(-1), sizes):
        begin = min(max(int(start), 0), x_shape[a] - size)
        region[a] = slice(begin, begin + size)
    return tuple(region)


def _dynamic_shape(t: TensorSpec, index: TensorSpec, axes: tuple[int, ...],
                   sizes: tuple[int, ...]) -> tuple[int, ...]:
    check_int_indices(index, "index")
    if len(axes) != len(sizes) or index.shape not in ((len(axes),), ()) or (
            not index.shape and len(axes) != 1):
        raise ShapeError(f"index {index}, axes {axes} and sizes {sizes} must have one entry each")
    if len(set(axes)) != len(axes):
        raise ShapeError(f"repeated axis in {axes}")
    for a, size in zip(axes, sizes):
        if not 0 <= size <= t.shape[a]:
            raise ShapeError(f"size {size} does not fit axis {a} of {t}")
    return tuple(sizes[axes.index(i)] if i in axes else d for i, d in enumerate(t.shape))


def _dynamic_slice_infer(t: TensorSpec, index: TensorSpec, axes: tuple[int, ...],
                         sizes: tuple[int, ...], no_overlap: bool) -> TensorSpec:
    return TensorSpec(_dynamic_shape(t, index, axes, sizes), t.dtype)


def _dynamic_slice(x: np.ndarray, index: np.ndarray, axes: tuple[int, ...],
                   sizes: tuple[int, ...], no_overlap: bool) -> np.ndarray:
    return x[_region(x.shape, index, axes, sizes)]


def _source(pos: tuple[int, ...], shape: tuple[int, ...], index: np.ndarray,
            axes: tuple[int, ...], sizes: tuple[int, ...]) -> tuple[int, ...]:
    """Reference: where element ``pos`` of the region lies in the full tensor."""
    out = list(pos)
    for a, start, size in zip(axes, np.asarray(index).reshape(-1), sizes):
        out[a] += int(np.clip(int(start), 0, shape[a] - size))
    return tuple(out)


def _dynamic_slice_ref(x, index, axes, sizes, no_overlap):
    shape = tuple(sizes[axes.index(i)] if i in axes else d for i, d in enumerate(x.shape))
    out = np.zeros(shape, x.dtype)
    for pos in np.ndindex(*out.shape):
        out[pos] = x[_source(pos, x.shape, index, axes, sizes)]
    return out


def _dynamic_update_infer(t: TensorSpec, index: TensorSpec, update: TensorSpec,
                          axes: tuple[int, ...], sizes: tuple[int, ...],
                          no_overlap: bool) -> TensorSpec:
    same_dtype(t, update)
    want = _dynamic_shape(t, index, axes, sizes)
    if update.shape != want:
        raise ShapeError(f"the update must have shape {want}, got {update}")
    return t


def _dynamic_update_inplace(x, index, update, axes, sizes, no_overlap):
    x[_region(x.shape, index, axes, sizes)] = update
    return x


def _written_region(x, index, update, axes, sizes, no_overlap):
    return _region(x.shape, index, axes, sizes)


def _dynamic_update(x, index, update, axes, sizes, no_overlap):
    return _dynamic_update_inplace(x.copy(), index, update, axes, sizes, no_overlap)


def _dynamic_update_ref(x, index, update, axes, sizes, no_overlap):
    out = x.copy()
    for pos in np.ndindex(*update.shape):
        out[_source(pos, x.shape, index, axes, sizes)] = update[pos]
    return out


def _dynamic_slice_grad(g: Any, dy: Tensor) -> tuple[Any, ...]:
    x = g.x(0)
    return dynamic_update(init(x.shape, x.dtype), g.x(1), dy, **g.attrs), None


def _dynamic_update_grad(g: Any, dy: Tensor) -> tuple[Any, ...]:
    upd = g.x(2)
    kept = dynamic_update(dy, g.x(1), init(upd.shape, upd.dtype), **g.attrs)
    return kept, None, dynamic_slice(dy, g.x(1), **g.attrs)


def _dynamic_samples(update: bool):
    def samples(rng: np.random.Generator) -> list[Sample]:
        cases = [((5, 6), [1, 2], (0, 1), (2, 3)), ((4, 3, 5), [3], (2,), (2,)),
                 ((6, 4), [5, -3], (0, 1), (3, 2))]  # the last offsets are clamped
        out = []
        for shape, index, axes, sizes in cases:
            x = rng.normal(size=shape)
            idx = np.array(index)
            attrs = {"axes": axes, "sizes": sizes, "no_overlap": True}
            region = tuple(sizes[axes.index(i)] if i in axes else d for i, d in enumerate(shape))
            args = (x, idx, rng.normal(size=region)) if update else (x, idx)
            out.append(Sample(args, attrs))
        return out

    return samples


_DYNAMIC_SLICE = OpDef("dynamic_slice", _dynamic_slice_infer, _dynamic_slice,
                       _dynamic_slice_grad, view=True, ref=_dynamic_slice_ref,
                       samples=_dynamic_samples(False), layout=region_layout)
_DYNAMIC_UPDATE = OpDef("dynamic_update", _dynamic_update_infer, _dynamic_update,
                        _dynamic_update_grad, ref=_dynamic_update_ref,
                        samples=_dynamic_samples(True))
_DYNAMIC_UPDATE_ = OpDef("dynamic_update_", _dynamic_update_infer, _dynamic_update_inplace,
                         inplace_of=0, ref=_dynamic_update_ref, samples=_dynamic_samples(True),
                         region=_written_region)


def _dynamic_attrs(t: Tensor, axes: Sequence[int], sizes: Sequence[int],
                   no_overlap: bool) -> dict[str, Any]:
    axes = tuple(normalize_axes(a, t.rank)[0] for a in axes)
    return {"axes": axes, "sizes": tuple(int(s) for s in sizes), "no_overlap": bool(no_overlap)}


@register(_DYNAMIC_SLICE)
def dynamic_slice(t: Tensor, index: Tensor, axes: Sequence[int], sizes: Sequence[int],
                  no_overlap: bool = False) -> Tensor:
    """The region of ``t`` of ``sizes`` along ``axes`` starting at the run-time offsets
    ``index`` (an integer tensor, one entry per axis). Offsets are clamped so the region fits.
    ``no_overlap`` is a performance hint in PopXL and ignored here."""
    return apply1(_DYNAMIC_SLICE, [t, as_index_tensor(index)],
                  _dynamic_attrs(t, axes, sizes, no_overlap))


@register(_DYNAMIC_UPDATE)
def dynamic_update(t: Tensor, index: Tensor, t_update: Tensor, axes: Sequence[int],
                   sizes: Sequence[int], no_overlap: bool = False) -> Tensor:
    """A copy of ``t`` with the ``dynamic_slice`` region at ``index`` replaced by ``t_update``."""
    return apply1(_DYNAMIC_UPDATE, [t, as_index_tensor(index), t_update],
                  _dynamic_attrs(t, axes, sizes, no_overlap))


@register(_DYNAMIC_UPDATE_)
def dynamic_update_(t: Tensor, index: Tensor, t_update: Tensor, axes: Sequence[int],
                    sizes: Sequence[int], no_overlap: bool = False) -> Tensor:
    """In-place ``dynamic_update``: modifies and returns ``t``."""
    return apply1(_DYNAMIC_UPDATE_, [t, as_index_tensor(index), t_update],
                  _dynamic_attrs(t, axes, sizes, no_overlap))
