"""Host-side numpy helpers for sharded and replicated data."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["shard", "unshard_arrays", "unshard", "repeat", "repeat_axis", "split2D", "shard2D",
           "unshard2D", "repeat_shard", "tensor_parallel_input", "tensor_parallel_output",
           "pad_axis", "squeeze_safe", "handle_negative_axis"]


def shard(x: np.ndarray, n: int, axis: int) -> np.ndarray:
    """Split ``x`` into ``n`` equal parts along ``axis``, stacked on a new leading axis."""
    return np.ascontiguousarray(np.stack(np.split(x, n, axis=axis)))


def unshard_arrays(xs: list[np.ndarray] | np.ndarray, axis: int) -> np.ndarray:
    """Join shards (a list, or a leading shard axis) along ``axis``."""
    return np.concatenate(list(xs), axis=axis)


def unshard(x: np.ndarray, axis: int) -> np.ndarray:
    """Undo ``shard``: join the leading shard axis into ``axis`` (of one shard)."""
    return unshard_arrays(x, axis)


def repeat(x: np.ndarray, n: int, axis: int = 0) -> np.ndarray:
    """``n`` copies of ``x`` stacked on a new axis ``axis``."""
    return np.repeat(np.expand_dims(x, axis), n, axis=axis)


def repeat_axis(x: np.ndarray, n: int, axis: int = 0) -> np.ndarray:
    """``x`` tiled ``n`` times along the existing ``axis`` (``[a, b]`` -> ``[a, b, a, b]``)."""
    return np.concatenate([x] * n, axis=axis)


def split2D(x: np.ndarray, n_1: int, n_2: int, axis_1: int, axis_2: int,  # noqa: N802
            ) -> np.ndarray:
    """``x`` cut ``n_1`` ways along ``axis_1`` (outer) and ``n_2`` ways along ``axis_2``
    (inner): the ``n_1 * n_2`` blocks stacked outer-major on a new leading axis."""
    blocks = np.stack([shard(part, n_2, axis_2) for part in np.split(x, n_1, axis=axis_1)])
    return blocks.reshape((n_1 * n_2, *blocks.shape[2:]))


def shard2D(x: np.ndarray, n_1: int, n_2: int, axis_1: int, axis_2: int,  # noqa: N802
            ) -> np.ndarray:
    """The same blocks as ``split2D``."""
    return split2D(x, n_1, n_2, axis_1, axis_2)


def unshard2D(x: np.ndarray, n_1: int, n_2: int, axis_1: int, axis_2: int,  # noqa: N802
              ) -> np.ndarray:
    """Undo ``shard2D``."""
    blocks = x.reshape((n_1, n_2, *x.shape[1:]))
    return np.concatenate([np.concatenate(list(row), axis=axis_2) for row in blocks],
                          axis=axis_1)


def repeat_shard(x: np.ndarray, n_repeats: int, n_shards: int, shard_axis: int,
                 sharded_tensor: str = "contiguous") -> np.ndarray:
    """Shards of ``x`` for ``n_repeats * n_shards`` replicas: ``"contiguous"`` tiles the whole
    set (``s0 s1 s0 s1``), ``"strided"`` repeats each shard in a block (``s0 s0 s1 s1``)."""
    shards = shard(x, n_shards, shard_axis)
    if sharded_tensor == "contiguous":
        return np.concatenate([shards] * n_repeats, axis=0)
    if sharded_tensor == "strided":
        return np.repeat(shards, n_repeats, axis=0)
    raise ValueError(f"sharded_tensor must be 'contiguous' or 'strided', got {sharded_tensor!r}")


def tensor_parallel_input(input_data: np.ndarray, tp: int, rf: int,
                          repeat_fn: Callable[[np.ndarray, int], Any] | None = None,
                          ) -> np.ndarray:
    """Host data ``[n, *shape]`` for ``rf`` replicas in tensor-parallel groups of ``tp``: each
    sample repeated ``tp`` times in a row (copy ``i`` passed through ``repeat_fn(copy, i)``
    when given), reshaped to ``[n * tp / rf, rf, *shape]``, leading axes of length 1 squeezed.

    Raises:
        ValueError: ``tp > rf`` or ``rf % tp != 0``.
    """
    if tp > rf or rf % tp:
        raise ValueError(f"tensor_parallel_input: tp={tp} must divide rf={rf}")
    data = np.asarray(input_data)
    copies = []
    for sample in data:
        for i in range(tp):
            copies.append(repeat_fn(sample.copy(), i) if repeat_fn else sample)
    out = np.stack(copies).reshape((data.shape[0] * tp // rf, rf, *data.shape[1:]))
    while out.ndim and out.shape[0] == 1:
        out = out[0]
    return out


def tensor_parallel_output(out: np.ndarray, num_host_transfers: int, tp: int, rf: int,
                           data_shape: tuple[int, ...], tp_identical: bool = True,
                           true_num_host_transfers: int | None = None) -> np.ndarray:
    """Host outputs of a tensor-parallel run, per sample: ``out`` read as
    ``[transfers, rf / tp, tp, *data_shape]``, the first ``true_num_host_transfers`` kept,
    samples flattened to ``[samples, tp, *data_shape]``, and only TP replica 0 kept when the
    TP replicas hold identical values (``[samples, *data_shape]``)."""
    dp = rf // tp
    arr = np.asarray(out).reshape((num_host_transfers, dp, tp, *data_shape))
    if true_num_host_transfers is not None:
        arr = arr[:true_num_host_transfers]
    arr = arr.reshape((-1, tp, *data_shape))
    return arr[:, 0] if tp_identical else arr


def pad_axis(x: np.ndarray, n: int, axis: int, value: Any = 0) -> np.ndarray:
    """``x`` padded with ``value`` at the end of ``axis`` to length ``n`` (which must not be
    below the current length: AssertionError)."""
    extra = n - x.shape[axis]
    assert extra >= 0, f"pad_axis: axis {axis} has {x.shape[axis]} > {n} elements"
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, extra)
    return np.pad(x, widths, constant_values=value)


def handle_negative_axis(x: np.ndarray, axis: int) -> int:
    """``axis`` of ``x`` counted from 0.

    Raises:
        IndexError: ``x`` is 0-d or ``axis`` is out of range.
    """
    rank = np.ndim(x)
    if rank == 0 or not -rank <= axis < rank:
        raise IndexError(f"axis {axis} is out of range for an array of rank {rank}")
    return axis % rank


def squeeze_safe(x: np.ndarray, axis: int | tuple[int, ...] | None = None) -> np.ndarray:
    """``x`` without the listed axes that have length 1 (others are kept, not an error);
    every length-1 axis when ``axis`` is None."""
    if axis is None:
        return np.squeeze(x)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    drop = tuple(a for a in (handle_negative_axis(x, a) for a in axes) if x.shape[a] == 1)
    return np.squeeze(x, drop) if drop else x
