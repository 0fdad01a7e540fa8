"""The one range check of 64-bit torch data entering xlgraph's 32-bit types.

PopTorch (and so the torch frontends) runs int64 as int32 and float64 as float32. A value the
32-bit type cannot hold would wrap (``2**40 + 5`` becomes 5) or become inf; ``narrowed``
refuses it instead, naming the tensor, as ``Session.run`` does for stream data. PopTorch also
warns that range or precision may be lost; ``warn_narrowed`` does it once per 64-bit type each
time a model compiles.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterable
from typing import Any

import numpy as np

from xlgraph import dtypes
from xlgraph.errors import StreamInputError

__all__ = ["narrowed", "fits", "warn_narrowed"]


def _first_bad(array: np.ndarray, want: np.dtype) -> Any:
    """The first value of ``array`` that ``want`` cannot hold (wraps, or a finite float that
    overflows to inf), or None."""
    wrapped = dtypes.out_of_range(array, want)
    if wrapped is not None:
        return wrapped
    if array.dtype.kind == "f" and want.kind == "f" and array.size:
        limit = np.finfo(want).max
        bad = np.isfinite(array) & (np.abs(array) > limit)
        if bad.any():
            return array[bad].flat[0]
    return None


def fits(array: np.ndarray, want: np.dtype) -> bool:
    """Whether every value of ``array`` survives the cast to ``want``."""
    return _first_bad(array, want) is None


def narrowed(array: np.ndarray, want: Any, what: str) -> np.ndarray:
    """``array`` cast to ``want`` (as is when it has that dtype already).

    Raises:
        StreamInputError: a value that would wrap around or overflow to inf, naming ``what``
            (``"input 'x'"``), the value and both dtypes.
    """
    want = np.dtype(want)
    if array.dtype == want:
        return array
    bad = _first_bad(array, want)
    if bad is not None:
        result = "wrap around" if want.kind in "iu" else "become inf"
        raise StreamInputError(
            f"{what} ({array.dtype} of shape {array.shape}): the value {bad.item()!r} does not "
            f"fit in {want}, the type xlgraph runs {array.dtype} as (PopTorch's 32-bit rule); "
            f"it would {result}. Keep the values within {want}'s range or cast the tensor "
            f"first")
    with np.errstate(over="ignore"):
        return array.astype(want)


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_NARROW = {"torch.int64": "torch.int32", "torch.float64": "torch.float32"}


def _user_stacklevel() -> int:
    """The ``warnings.warn`` stack level, from ``warn_narrowed``'s caller, of the innermost
    frame outside the xlgraph package: the user's call."""
    frame, level = sys._getframe(2), 2
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


def warn_narrowed(tensors: Iterable[tuple[str, Any]]) -> None:
    """One ``UserWarning`` per 64-bit torch dtype among ``tensors`` (``(what, dtype)`` pairs,
    ``("input 'x'", torch.int64)``), naming the first tensor of that type and how many more
    there are: PopTorch's warning that the IPU computes it in 32 bits."""
    found: dict[str, list[str]] = {}
    for what, dtype in tensors:
        if str(dtype) in _NARROW:
            found.setdefault(str(dtype), []).append(what)
    for dtype, names in found.items():
        more = f" and {len(names) - 1} more" if len(names) > 1 else ""
        warnings.warn(f"{dtype} is not supported natively on IPU, loss of range/precision may "
                      f"occur: {names[0]}{more} run as {_NARROW[dtype]} (values that do not fit "
                      f"raise). Only the first instance warns.", UserWarning,
                      stacklevel=_user_stacklevel())
