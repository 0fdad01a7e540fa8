"""Host-side numpy helpers for sharded and replicated data."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["shard", "unshard_arrays", "unshard", "repeat", "repeat_axis", "split2D", "shard2D",
           "unshard2D", "repeat_shard", "tensor_parallel_input", "pad_axis"]


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
    """Every element of ``x`` repeated ``n`` times along the existing ``axis``."""
    return np.repeat(x, n, axis=axis)


def split2D(x: np.ndarray, n_1: int, n_2: int, axis_1: int, axis_2: int,  # noqa: N802
            ) -> np.ndarray:
    """``x`` cut ``n_1`` ways along ``axis_1`` and ``n_2`` ways along ``axis_2``: shape
    ``(n_1, n_2, *block)``."""
    return np.stack([shard(part, n_2, axis_2) for part in np.split(x, n_1, axis=axis_1)])


def shard2D(x: np.ndarray, n_1: int, n_2: int, axis_1: int, axis_2: int,  # noqa: N802
            ) -> np.ndarray:
    """As ``split2D`` with the two shard axes flattened into one of ``n_1 * n_2``."""
    blocks = split2D(x, n_1, n_2, axis_1, axis_2)
    return blocks.reshape((n_1 * n_2, *blocks.shape[2:]))


def unshard2D(x: np.ndarray, n_1: int, n_2: int, axis_1: int, axis_2: int,  # noqa: N802
              ) -> np.ndarray:
    """Undo ``shard2D``."""
    blocks = x.reshape((n_1, n_2, *x.shape[1:]))
    return np.concatenate([np.concatenate(list(row), axis=axis_2) for row in blocks],
                          axis=axis_1)


def repeat_shard(x: np.ndarray, n_repeats: int, n_shards: int, shard_axis: int,
                 sharded_tensor: str = "contiguous") -> np.ndarray:
    """Shards of ``x`` for ``n_repeats * n_shards`` replicas: ``"contiguous"`` repeats each
    shard in a block (``s0 s0 s1 s1``), ``"strided"`` repeats the whole set (``s0 s1 s0 s1``)."""
    shards = shard(x, n_shards, shard_axis)
    if sharded_tensor == "contiguous":
        return np.repeat(shards, n_repeats, axis=0)
    if sharded_tensor == "strided":
        return np.concatenate([shards] * n_repeats, axis=0)
    raise ValueError(f"sharded_tensor must be 'contiguous' or 'strided', got {sharded_tensor!r}")


def tensor_parallel_input(input_data: np.ndarray, tp: int, rf: int,
                          repeat_fn: Callable[[np.ndarray, int], Any] | None = None,
                          ) -> np.ndarray:
    """Host data for ``rf`` replicas of which groups of ``tp`` share one input: ``input_data``
    has a leading axis of ``rf // tp`` (one per data-parallel group); each is repeated ``tp``
    times (or passed through ``repeat_fn(x, tp)``)."""
    data = np.asarray(input_data)
    if rf % tp:
        raise ValueError(f"tensor_parallel_input: tp={tp} does not divide rf={rf}")
    groups = rf // tp
    if groups == 1 and data.shape[:1] != (1,):
        data = data[None]
    fn = repeat_fn or (lambda x, n: repeat(x, n, 0))
    out = np.concatenate([fn(d, tp) for d in data])
    return out


def pad_axis(x: np.ndarray, n: int, axis: int) -> np.ndarray:
    """``x`` zero-padded at the end of ``axis`` to length ``n``."""
    extra = n - x.shape[axis]
    if extra < 0:
        raise ValueError(f"pad_axis: axis {axis} has {x.shape[axis]} > {n} elements")
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, extra)
    return np.pad(x, widths)
