"""``split``: one op with one output per part (PopART's ``SplitOp``)."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import numpy as np

from xlgraph.errors import ShapeError
from xlgraph.op import OpDef, Sample, apply, normalize_axes, register
from xlgraph.ops.movement import concat
from xlgraph.tensor import Tensor, TensorSpec, constant

__all__ = ["split"]


def _split_infer(t: TensorSpec, splits: tuple[int, ...], axis: int) -> tuple[TensorSpec, ...]:
    return tuple(TensorSpec(t.shape[:axis] + (s,) + t.shape[axis + 1:], t.dtype) for s in splits)


def _outputs(parts: list[np.ndarray]) -> Any:
    """A kernel's result: the array of a one-output op, else the tuple."""
    return tuple(parts) if len(parts) != 1 else parts[0]


def _split(x: np.ndarray, splits: tuple[int, ...], axis: int) -> Any:
    """Each part a new C-ordered array (PopART's outputs are not views of the input)."""
    cuts = np.cumsum(splits)[:-1]
    return _outputs([np.ascontiguousarray(p) for p in np.split(x, cuts, axis=axis)])


def _split_ref(x: np.ndarray, splits: tuple[int, ...], axis: int) -> Any:
    parts, begin = [], 0
    for s in splits:
        parts.append(np.take(x, np.arange(begin, begin + s), axis=axis))
        begin += s
    return _outputs(parts)


def _split_grad(g: Any, *dys: Tensor | None) -> tuple[Tensor]:
    """The parts' gradients joined again; a part with none contributes zeros."""
    parts = [dy if dy is not None else constant(np.zeros(y.shape, y.dtype.as_numpy()))
             for dy, y in zip(dys, g.op.outputs)]
    return (concat(parts, g.attrs["axis"]),)


def _split_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample((rng.normal(size=(2, 6)),), {"splits": (2, 2, 2), "axis": 1}),
            Sample((rng.normal(size=(5, 3)),), {"splits": (1, 4), "axis": 0}),
            Sample((rng.normal(size=(3, 2)),), {"splits": 1, "axis": 0})]


_SPLIT = OpDef("split", _split_infer, _split, _split_grad, ref=_split_ref,
               samples=_split_samples)


@register(_SPLIT)
def split(t: Tensor, splits: int | Sequence[int], axis: int = 0) -> list[Tensor]:
    """Split ``t`` along ``axis`` into ``splits`` equal parts, or parts of the given sizes: one
    op with one output per part (PopART's ``SplitOp``)."""
    axis = normalize_axes(axis, t.rank)[0]
    n = t.shape[axis]
    if isinstance(splits, int | np.integer):
        if splits < 1 or n % splits:
            raise ShapeError(f"split: axis {axis} of {t.id} {t.spec} is not divisible by {splits}")
        sizes = [n // int(splits)] * int(splits)
    else:
        sizes = [int(s) for s in splits]
        if builtins.sum(sizes) != n or builtins.min(sizes, default=0) < 0:
            raise ShapeError(f"split: sizes {sizes} do not add up to {n} (axis {axis} of {t.id})")
    return list(apply(_SPLIT, [t], {"splits": tuple(sizes), "axis": axis}))
