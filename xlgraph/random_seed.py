"""Host helpers for random seeds: a seed is a ``uint32[2]`` array holding the high and low
words of a 64-bit key."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["create_seeds", "two_uint32_to_uint64", "uint64_to_two_uint32", "MAX_UINT64"]

MAX_UINT64 = (1 << 64) - 1  # the largest seed key


def create_seeds(seed: int, offset: int = 0, batches_per_step: int = 1,
                 gradient_accumulation_factor: int = 1, replicas: int = 1) -> np.ndarray:
    """Host helper: deterministic seeds, one ``uint32[2]`` per batch, accumulation step and
    replica, drawn with ``np.random.default_rng(seed + offset)``.

    Returns:
        uint32 array ``(batches_per_step, gradient_accumulation_factor, replicas, 2)`` with
        the size-1 dims squeezed out (a single seed is shape ``(2,)``).

    Example:
        >>> create_seeds(0).shape
        (2,)
    """
    rng = np.random.default_rng(seed + offset)
    shape = (batches_per_step, gradient_accumulation_factor, replicas, 2)
    return np.squeeze(rng.integers(0, 1 << 32, size=shape, dtype=np.uint64).astype(np.uint32))


def two_uint32_to_uint64(a: Any, b: Any = None) -> int:
    """The 64-bit key of the words ``a`` (high) and ``b`` (low); with ``b`` omitted, ``a`` is
    a seed ``[high, low]``. int32 data is read bitwise."""
    words = np.asarray(a if b is None else [a, b]).astype(np.uint32)
    if words.shape != (2,):
        raise ValueError(f"two_uint32_to_uint64 needs two words, got shape {words.shape}")
    hi, lo = (int(w) for w in words)
    return (hi << 32) | lo


def uint64_to_two_uint32(num: int) -> np.ndarray:
    """The seed ``uint32[2]`` ``[high, low]`` of a 64-bit key.

    Raises:
        ValueError: ``num`` is outside ``[0, MAX_UINT64]``.
    """
    num = int(num)
    if not 0 <= num <= MAX_UINT64:
        raise ValueError(f"{num} is not a uint64: it must be in [0, MAX_UINT64 = {MAX_UINT64}]")
    return np.array([num >> 32, num & 0xFFFFFFFF], dtype=np.uint32)
