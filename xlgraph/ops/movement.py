"""Shape and data-movement ops: reshape, flatten, transpose, squeeze, slice, concat, expand...

Over 400 lines: one family of small records (a view or copy, its shape rule and
layout, its gradient another movement op); splitting it would scatter gradient pairs.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import numpy as np

from xlgraph import dtypes
from xlgraph.errors import DTypeError, ShapeError, user_source_line
from xlgraph.layout import broadcast_layout, index_layout, permuted_layout, same_layout
from xlgraph.op import (
    OpDef,
    Sample,
    apply1,
    explained,
    normalize_axes,
    register,
    same_dtype,
    same_spec,
)
from xlgraph.ops.replicas import aligned, unchanged
from xlgraph.tensor import Tensor, TensorSpec


def _normal(*shape: int):
    return lambda rng: rng.normal(size=shape)


# -- reshape / flatten -------------------------------------------------------------------------
def _resolve_shape(src: tuple[int, ...], shape: Sequence[int]) -> tuple[int, ...]:
    shape = tuple(int(d) for d in shape)
    n = int(np.prod(src, dtype=np.int64))
    if shape.count(-1) > 1:
        raise ShapeError(f"at most one -1 allowed in {shape}")
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
        if known == 0 or n % known:
            raise ShapeError(f"cannot reshape {src} into {shape}")
        shape = tuple(n // known if d == -1 else d for d in shape)
    if int(np.prod(shape, dtype=np.int64)) != n:
        raise ShapeError(f"cannot reshape {src} ({n} elements) into {shape}")
    return shape


def _reshape_infer(t: TensorSpec, shape: tuple[int, ...]) -> TensorSpec:
    return TensorSpec(_resolve_shape(t.shape, shape), t.dtype)


def _reshape(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return x.reshape(shape)


def _reshape_replicated(ctx: Any, x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return x.reshape(x.shape[:1] + shape)


def _reshape_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample((rng.normal(size=(3, 4)),), {"shape": (2, -1)})]


_RESHAPE = OpDef("reshape", _reshape_infer, _reshape, lambda g, dy: (reshape(dy, g.x(0).shape),),
                 view=True, samples=_reshape_samples, layout=same_layout,
                 replicated=_reshape_replicated, half_view=True)
_RESHAPE_ = OpDef("reshape_", _reshape_infer, _reshape, inplace_of=0, view=True,
                  samples=_reshape_samples, layout=same_layout,
                 replicated=_reshape_replicated)


@register(_RESHAPE)
def reshape(t: Tensor, shape: Sequence[int]) -> Tensor:
    """``t`` with a new shape (one dimension may be -1)."""
    return apply1(_RESHAPE, [t], {"shape": _resolve_shape(t.shape, shape)})


@register(_RESHAPE_)
def reshape_(t: Tensor, shape: Sequence[int]) -> Tensor:
    """Reshape that aliases ``t``."""
    return apply1(_RESHAPE_, [t], {"shape": _resolve_shape(t.shape, shape)})


@explained("flatten")
def flatten(t: Tensor) -> Tensor:
    """``t`` as a 1-D tensor."""
    return reshape(t, (-1,))


@explained("flatten_")
def flatten_(t: Tensor) -> Tensor:
    """``flatten`` that aliases ``t``."""
    return reshape_(t, (-1,))


# -- transpose ---------------------------------------------------------------------------------
def _transpose_infer(t: TensorSpec, permutation: tuple[int, ...]) -> TensorSpec:
    if sorted(permutation) != list(range(len(t.shape))):
        raise ShapeError(f"permutation {permutation} does not match rank {len(t.shape)}")
    return TensorSpec(tuple(t.shape[p] for p in permutation), t.dtype)


def _transpose(x: np.ndarray, permutation: tuple[int, ...]) -> np.ndarray:
    return x.transpose(permutation)


def _transpose_replicated(ctx: Any, x: np.ndarray, permutation: tuple[int, ...]) -> np.ndarray:
    return x.transpose((0, *(p + 1 for p in permutation)))


def _transpose_grad(g: Any, dy: Tensor) -> tuple[Tensor]:
    inverse = tuple(int(i) for i in np.argsort(g.attrs["permutation"]))
    made = dy.producer
    if (inverse == (1, 0) and made is not None and made.defn.name == "matmul"
            and all(t.rank == 2 for t in made.inputs)):
        # (a b)^T as b^T a^T (the same matmul op): the gradient of a transposed weight
        # (``x @ w.T``) comes out in the weight's own layout, as torch computes it, instead of
        # as a transposed view
        a, b = made.inputs
        return (apply1(made.defn, [transpose(b, (1, 0)), transpose(a, (1, 0))], made.attrs),)
    return (transpose(dy, inverse),)


def _transpose_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample((rng.normal(size=(2, 3, 4)),), {"permutation": (2, 0, 1)})]


_TRANSPOSE = OpDef("transpose", _transpose_infer, _transpose, _transpose_grad, view=True,
                   samples=_transpose_samples, layout=permuted_layout,
                   replicated=_transpose_replicated, half_view=True)
_TRANSPOSE_ = OpDef("transpose_", _transpose_infer, _transpose, inplace_of=0, view=True,
                    samples=_transpose_samples, layout=permuted_layout,
                   replicated=_transpose_replicated)


def _perm(t: Tensor, permutation: Sequence[int] | None) -> tuple[int, ...]:
    return tuple(reversed(range(t.rank))) if permutation is None else tuple(permutation)


@register(_TRANSPOSE)
def transpose(t: Tensor, permutation: Sequence[int] | None = None) -> Tensor:
    """Permute the axes of ``t`` (reverse them when ``permutation`` is None)."""
    return apply1(_TRANSPOSE, [t], {"permutation": _perm(t, permutation)})


@register(_TRANSPOSE_)
def transpose_(t: Tensor, permutation: Sequence[int] | None = None) -> Tensor:
    """``transpose`` that aliases ``t``."""
    return apply1(_TRANSPOSE_, [t], {"permutation": _perm(t, permutation)})


@explained("squeeze")
def squeeze(t: Tensor, axes: Sequence[int] | int | None = None) -> Tensor:
    """Remove size-1 axes (all of them when ``axes`` is None)."""
    if axes is None:
        drop = tuple(i for i, d in enumerate(t.shape) if d == 1)
    else:
        drop = normalize_axes(axes, t.rank)
        bad = [a for a in drop if t.shape[a] != 1]
        if bad:
            raise ShapeError(f"squeeze: axes {bad} of {t.id} {t.spec} are not of size 1")
    return reshape(t, tuple(d for i, d in enumerate(t.shape) if i not in drop))


# -- slicing -----------------------------------------------------------------------------------
def _index_shape(shape: tuple[int, ...], index: tuple[Any, ...]) -> tuple[int, ...]:
    try:
        return np.broadcast_to(np.empty((), np.int8), shape)[index].shape
    except IndexError as exc:
        raise ShapeError(f"index {index} is invalid for shape {shape}: {exc}") from None


def _slice_infer(t: TensorSpec, index: tuple[Any, ...]) -> TensorSpec:
    return TensorSpec(_index_shape(t.shape, index), t.dtype)


def _slice(x: np.ndarray, index: tuple[Any, ...]) -> np.ndarray:
    return x[index]


def _slice_replicated(ctx: Any, x: np.ndarray, index: tuple[Any, ...]) -> np.ndarray:
    return x[(builtins.slice(None), *index)]


def _slice_grad_infer(dy: TensorSpec, shape: tuple[int, ...], index: tuple[Any, ...]) -> TensorSpec:
    return TensorSpec(shape, dy.dtype)


def _slice_grad(dy: np.ndarray, shape: tuple[int, ...], index: tuple[Any, ...]) -> np.ndarray:
    out = np.zeros(shape, dy.dtype)
    out[index] = dy
    return out


def _slice_samples(rng: np.random.Generator) -> list[Sample]:
    x = rng.normal(size=(5, 6))
    return [Sample((x,), {"start": [1, 5], "stop": [4, None], "step": [1, -2], "axis": [0, 1]}),
            Sample((x,), {"start": 2, "stop": 3, "axis": 1})]


_SLICE_GRAD = OpDef(
    "slice_grad", _slice_grad_infer, _slice_grad,
    lambda g, dy: (_apply_slice(dy, g.attrs["index"]),),
    samples=lambda rng: [Sample((rng.normal(size=(3, 3)),),
                                {"shape": (5, 6),
                                 "index": (builtins.slice(1, 4), builtins.slice(None, None, 2))})],
    c_contiguous=True,  # np.zeros' C order
)
_SLICE = OpDef("slice", _slice_infer, _slice,
               lambda g, dy: (slice_grad(dy, g.x(0).shape, g.attrs["index"]),), view=True,
               samples=_slice_samples, layout=index_layout,
               replicated=_slice_replicated, half_view=True)
_SLICE_ = OpDef("slice_", _slice_infer, _slice, inplace_of=0, view=True, samples=_slice_samples,
                layout=index_layout, replicated=_slice_replicated)


@register(_SLICE_GRAD)
def slice_grad(dy: Tensor, shape: tuple[int, ...], index: tuple[Any, ...]) -> Tensor:
    """Zeros of ``shape`` with ``dy`` written at ``index`` (the gradient of slicing)."""
    return apply1(_SLICE_GRAD, [dy], {"shape": tuple(shape), "index": index})


def _apply_slice(t: Tensor, index: tuple[Any, ...], defn: OpDef = _SLICE) -> Tensor:
    return apply1(defn, [t], {"index": index})


def _slice_index(
    t: Tensor, start: Any, stop: Any, step: Any, axis: Any
) -> tuple[Any, ...]:
    def as_list(v: Any) -> list[Any]:
        return list(v) if isinstance(v, list | tuple) else [v]

    starts, stops, steps = as_list(start), as_list(stop), as_list(step)
    n = builtins.max(len(starts), len(stops), len(steps))
    axes = list(range(n)) if axis is None else as_list(axis)
    index: list[Any] = [builtins.slice(None)] * t.rank
    def pick(vals: list[Any], i: int) -> Any:
        return vals[i] if i < len(vals) else vals[0] if len(vals) == 1 else None

    for i, a in enumerate(axes):
        bounds = (pick(starts, i), pick(stops, i), pick(steps, i))
        index[normalize_axes(a, t.rank)[0]] = builtins.slice(*bounds)
    return tuple(index)


@register(_SLICE)
def slice(t: Tensor, start: Any = None, stop: Any = None, step: Any = None,  # noqa: A001
          axis: Any = None) -> Tensor:
    """Python-style slice of ``t`` along ``axis`` (ints or lists, one entry per axis)."""
    return _apply_slice(t, _slice_index(t, start, stop, step, axis))


@register(_SLICE_)
def slice_(t: Tensor, start: Any = None, stop: Any = None, step: Any = None,
           axis: Any = None) -> Tensor:
    """``slice`` that aliases ``t``."""
    return _apply_slice(t, _slice_index(t, start, stop, step, axis), _SLICE_)


def getitem(t: Tensor, key: Any) -> Tensor:
    """``t[key]`` for ints, slices and tuples of them (numpy basic indexing)."""
    key = key if isinstance(key, tuple) else (key,)
    for k in key:
        if not isinstance(k, int | np.integer | builtins.slice | type(Ellipsis)):
            raise TypeError(f"{t.id}[...]: {k!r} is not a valid index: only ints, slices, "
                            f"integer and boolean tensors or arrays are")
    return _apply_slice(t, tuple(int(k) if isinstance(k, np.integer) else k for k in key))


# -- concat ------------------------------------------------------------------------------------
def _concat_infer(*specs: TensorSpec, axis: int) -> TensorSpec:
    same_dtype(*specs)
    first = specs[0].shape
    for s in specs[1:]:
        if len(s.shape) != len(first) or any(
            a != b for i, (a, b) in enumerate(zip(s.shape, first)) if i != axis
        ):
            raise ShapeError(f"shapes differ outside axis {axis}")
    shape = list(first)
    shape[axis] = builtins.sum(s.shape[axis] for s in specs)
    return TensorSpec(tuple(shape), specs[0].dtype)


def _concat(*xs: np.ndarray, axis: int) -> np.ndarray:
    return np.concatenate(xs, axis=axis)


def _concat_grad(g: Any, dy: Tensor) -> tuple[Tensor, ...]:
    axis, grads, begin = g.attrs["axis"], [], 0
    for i in range(len(g.op.inputs)):
        size = g.op.inputs[i].shape[axis]
        index = tuple(builtins.slice(begin, begin + size) if a == axis else builtins.slice(None)
                      for a in range(dy.rank))
        grads.append(_apply_slice(dy, index))
        begin += size
    return tuple(grads)


def _concat_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample(([rng.normal(size=(2, 3)), rng.normal(size=(2, 5))],), {"axis": 1})]


_CONCAT = OpDef("concat", _concat_infer, _concat, _concat_grad, samples=_concat_samples)


@register(_CONCAT)
def concat(ts: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Join tensors along ``axis``; all of one dtype (else ``TypeError``, PopXL's words)."""
    ts = list(ts)
    if len({t.dtype for t in ts}) > 1:
        raise DTypeError(f"All inputs to a concat operation must have the same type: "
                         f"{[t.dtype for t in ts]} [at {user_source_line()}]")
    return apply1(_CONCAT, ts, {"axis": normalize_axes(axis, ts[0].rank)[0]})


@explained("concat_")
def concat_(ts: Sequence[Tensor], axis: int = 0) -> Tensor:
    """``concat``; xlgraph always produces a new buffer, so this equals ``concat``."""
    return concat(ts, axis)


# -- identity, detach, expand, init ------------------------------------------------------------
def _identity(x: np.ndarray) -> np.ndarray:
    return x


_IDENTITY = OpDef("identity", same_spec, _identity, lambda g, dy: (dy,), view=True,
                  samples=lambda rng: [Sample((rng.normal(size=(3, 4)),))], layout=same_layout,
                  replicated=unchanged(_identity), half_view=True)
_DETACH = OpDef("detach", same_spec, _identity, view=True,
                samples=lambda rng: [Sample((rng.normal(size=(3, 4)),))], layout=same_layout,
                replicated=unchanged(_identity), half_view=True)
_DETACH_ = OpDef("detach_", same_spec, _identity, inplace_of=0, view=True,
                 samples=lambda rng: [Sample((rng.normal(size=(3, 4)),))], layout=same_layout,
                  replicated=unchanged(_identity))


@register(_IDENTITY)
def identity(t: Tensor, output_name: str | None = None) -> Tensor:
    """A copy of ``t``, optionally named ``output_name``."""
    return apply1(_IDENTITY, [t], name=output_name)


rename = identity


@register(_DETACH)
def detach(t: Tensor) -> Tensor:
    """``t`` with no gradient flowing back through it."""
    return apply1(_DETACH, [t])


@register(_DETACH_)
def detach_(t: Tensor) -> Tensor:
    """``detach`` that aliases ``t``."""
    return apply1(_DETACH_, [t])


def _expand_infer(t: TensorSpec, shape: tuple[int, ...]) -> TensorSpec:
    from xlgraph.op import broadcast_shapes

    out = broadcast_shapes(t.shape, shape)
    if out != tuple(shape):
        raise ShapeError(f"cannot expand {t.shape} to {shape}")
    return TensorSpec(out, t.dtype)


def _expand(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return np.broadcast_to(x, shape)


def _expand_replicated(ctx: Any, x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return np.broadcast_to(aligned((x,), len(shape))[0], x.shape[:1] + tuple(shape))


_EXPAND = OpDef("expand", _expand_infer, _expand, lambda g, dy: (dy,), view=True,
                samples=lambda rng: [Sample((rng.normal(size=(3, 1)),), {"shape": (2, 3, 4)})],
                layout=broadcast_layout, replicated=_expand_replicated, half_view=True)


@register(_EXPAND)
def expand(t: Tensor, shape: Sequence[int]) -> Tensor:
    """Broadcast ``t`` to ``shape``."""
    return apply1(_EXPAND, [t], {"shape": tuple(int(d) for d in shape)})


def _init_infer(shape: tuple[int, ...], dtype: dtypes.dtype, init_type: str,
                meta_shape: tuple[int, ...] = ()) -> TensorSpec:
    if init_type not in ("zero", "undef"):
        raise ValueError(f"init_type must be 'zero' or 'undef', got {init_type!r}")
    return TensorSpec(shape, dtype, meta_shape)


def _init(shape: tuple[int, ...], dtype: dtypes.dtype, init_type: str,
          meta_shape: tuple[int, ...] = ()) -> np.ndarray:
    return np.zeros(shape, dtype.as_numpy())


_INIT = OpDef("init", _init_infer, _init,
              samples=lambda rng: [Sample((), {"shape": (2, 3), "dtype": dtypes.float32})])


@register(_INIT)
def init(shape: Sequence[int], dtype: dtypes.dtype, name: str | None = None,
         init_type: str = "zero", meta_shape: Sequence[int] | None = None) -> Tensor:
    """A new tensor of ``shape`` filled with zeros (``undef`` also gives zeros here);
    ``meta_shape`` is the whole tensor's shape when this is a replica shard."""
    attrs = {"shape": tuple(int(d) for d in shape), "dtype": dtypes.as_dtype(dtype),
             "init_type": init_type}
    if meta_shape:
        attrs["meta_shape"] = tuple(int(d) for d in meta_shape)
    return apply1(_INIT, [], attrs, name=name)
