"""Memory layouts of arrays, declared by view ops so the lowering never has to run them.

A layout is ``"C"`` (C-contiguous), ``"D"`` (dense in another axis order) or ``"?"`` (may be
non-dense: a stepped slice, a broadcast). View ops compute their output's layout from the
input's shape and their attributes with the helpers below (strides in elements).
"""

from __future__ import annotations

import builtins
from typing import Any

from xlgraph.tensor import TensorSpec


def c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a C-contiguous array of ``shape``."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def strides_layout(shape: tuple[int, ...], strides: tuple[int, ...]) -> str:
    """The layout of an array of ``shape`` with element ``strides`` (numpy's rules: axes of
    length 1 do not count, an empty array is C-contiguous)."""
    if 0 in shape:
        return "C"
    dims = [(n, st) for n, st in zip(shape, strides) if n > 1]
    expect = 1
    for n, st in reversed(dims):
        if st != expect:
            break
        expect *= n
    else:
        return "C"
    expect = 1
    for st, n in sorted((st, n) for n, st in dims):
        if st != expect:
            return "?"
        expect *= n
    return "D"


def same_layout(*_: Any, **__: Any) -> str:
    """Views whose output is the input's memory in the same order (reshape, identity)."""
    return "C"


def permuted_layout(spec: TensorSpec, permutation: tuple[int, ...], **_: Any) -> str:
    strides = c_strides(spec.shape)
    return strides_layout(tuple(spec.shape[p] for p in permutation),
                          tuple(strides[p] for p in permutation))


def broadcast_layout(spec: TensorSpec, shape: tuple[int, ...], **_: Any) -> str:
    lead = len(shape) - len(spec.shape)
    strides = (0,) * lead + tuple(0 if n == 1 and m != 1 else st for n, m, st in zip(
        spec.shape, shape[lead:], c_strides(spec.shape)))
    return strides_layout(tuple(shape), strides)


def region_layout(spec: TensorSpec, axes: tuple[int, ...], sizes: tuple[int, ...],
                  **_: Any) -> str:
    """Layout of a region of ``sizes`` along ``axes`` (a dynamic slice): the input's strides,
    whatever the run-time offsets."""
    shape = tuple(sizes[axes.index(i)] if i in axes else n for i, n in enumerate(spec.shape))
    return strides_layout(shape, c_strides(spec.shape))


def index_layout(spec: TensorSpec, index: tuple[Any, ...], **_: Any) -> str:
    """Layout of ``x[index]`` for basic indexing by ints, slices and one Ellipsis."""
    if any(k is Ellipsis for k in index):
        at = index.index(Ellipsis)
        fill = (builtins.slice(None),) * (len(spec.shape) - len(index) + 1)
        index = index[:at] + fill + index[at + 1:]
    index = index + (builtins.slice(None),) * (len(spec.shape) - len(index))
    shape, strides = [], []
    for k, n, st in zip(index, spec.shape, c_strides(spec.shape)):
        if isinstance(k, builtins.slice):
            bounds = k.indices(n)
            shape.append(len(range(*bounds)))
            strides.append(st * bounds[2])
    return strides_layout(tuple(shape), tuple(strides))
