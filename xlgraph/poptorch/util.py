"""Small helpers the conversions share: argument normalisation and dtype mapping."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from xlgraph import dtypes
from xlgraph.poptorch.narrowing import narrowed

__all__ = ["Unsupported", "dims", "pair", "torch_to_numpy", "xlgraph_dtype"]


class Unsupported(Exception):
    """An argument value a conversion does not handle (reported with the op's name)."""


def pair(value: Any, n: int = 2) -> tuple[int, ...]:
    """``3`` -> ``(3, 3)``; ``[3]`` -> ``(3, 3)`` (ATen's one-element lists); ``(2, 3)`` as is."""
    if isinstance(value, int | np.integer):
        return (int(value),) * n
    value = tuple(int(v) for v in value)
    return value * n if len(value) == 1 else value


def dims(dim: Any, rank: int) -> tuple[int, ...]:
    """ATen's ``dim`` argument (an int, a list, or None/[] for all) as sorted non-negative axes."""
    if dim is None:
        return ()
    items = (dim,) if isinstance(dim, int) else tuple(dim)
    return tuple(sorted(d + rank if d < 0 else d for d in items)) if rank else ()


_NARROW = {torch.float64: dtypes.float32, torch.int64: dtypes.int32}


def xlgraph_dtype(torch_dtype: torch.dtype) -> dtypes.dtype:
    """The xlgraph dtype a torch dtype runs as (64-bit types run as 32-bit, as in PopTorch)."""
    if torch_dtype in _NARROW:
        return _NARROW[torch_dtype]
    return getattr(dtypes, str(torch_dtype).removeprefix("torch."))


def torch_to_numpy(t: torch.Tensor, what: str = "a tensor") -> np.ndarray:
    """A numpy array of ``t`` in the dtype xlgraph runs it as; a 64-bit value that does not
    fit the 32-bit type raises ``StreamInputError`` naming ``what`` (``narrowing.narrowed``)."""
    array = t.detach().cpu().numpy()
    return narrowed(array, xlgraph_dtype(t.dtype).as_numpy(), what)
