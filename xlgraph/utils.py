"""Host data conversion (``to_numpy``) and small formatting helpers, as in ``popxl.utils``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from xlgraph import dtypes
from xlgraph.errors import MemmapError
from xlgraph.fp8_utils import host_pow2scale_cast_from_fp8, host_pow2scale_cast_to_fp8

__all__ = ["to_numpy", "table_to_string", "from_torch", "host_pow2scale_cast_to_fp8",
           "host_pow2scale_cast_from_fp8"]


def from_torch(data: Any) -> Any:
    """``data`` as numpy when it is a torch tensor (recognised without importing torch)."""
    if hasattr(data, "detach") and hasattr(data, "numpy"):
        return data.detach().cpu().numpy()
    return data


def to_numpy(x: Any, dtype: Any = None, downcast: bool = True, copy: bool = True,
             log2_scale: int | None = None, nan_on_overflow: bool | None = None) -> np.ndarray:
    """Host data (numpy, torch, nested lists, scalars) as a numpy array of an xlgraph dtype.

    Args:
        x: the data.
        dtype: the target dtype; inferred when None (Python floats are float32, ints int32).
        downcast: when inferring, store float64/int64/uint64 data as 32-bit.
        copy: always return a new array (False may return ``x`` itself; an ``np.memmap``
            is then returned as it is, PopXL's memory-mapped weights, or refused).
        log2_scale: for an fp8 ``dtype``: float data is scaled by ``2**log2_scale`` first.
        nan_on_overflow: for an fp8 ``dtype``: out-of-range values become NaN (True, the
            default) or saturate (False).

    Raises:
        TypeError: for graph tensors or data with no xlgraph dtype. ValueError: empty data.
        MemmapError: with ``copy=False``, a memmap that would need a copy (PopXL's checks).
    """
    if hasattr(x, "graph") and hasattr(x, "spec"):
        raise TypeError(f"to_numpy needs host data, got the graph tensor {x.id}")
    if not copy and isinstance(x, np.memmap):
        _check_memmap(x, dtype, downcast)
        return x  # PopXL's memmapped weights: the map itself is the host data
    data = from_torch(x)
    if dtype is not None and dtypes.as_dtype(dtype).is_fp8:
        return _to_fp8(data, dtypes.as_dtype(dtype), log2_scale, nan_on_overflow, copy)
    if dtype is None:
        arr = np.asarray(data)
        if arr.dtype == np.float64 and not isinstance(data, np.ndarray | np.generic):
            arr = arr.astype(np.float32)  # Python floats are float32, as in PopXL
        if arr.dtype == np.int64 and not isinstance(data, np.ndarray | np.generic):
            arr = arr.astype(np.int32)
        dt = dtypes.of_array(arr)
        if downcast:
            dt = dtypes.downcast(dt)
    else:
        dt = dtypes.as_dtype(dtype)
        arr = np.asarray(data)
    if arr.size == 0 and arr.shape == (0,) and not isinstance(data, np.ndarray):
        raise ValueError("to_numpy: empty data")
    wrapped = dtypes.out_of_range(arr, dt.as_numpy())
    if wrapped is not None:
        raise ValueError(f"to_numpy: {wrapped} does not fit in {dt.name} (it would wrap around)")
    return np.array(arr, dtype=dt.as_numpy()) if copy else np.asarray(arr, dt.as_numpy())


SPILL_BYTES = 64 << 20  # memmapped variables from this size keep their run snapshot on disk


def is_large_map(a: np.ndarray | None) -> bool:
    """Whether ``a`` is a memmap big enough that the Session keeps its copies on disk (no spare
    array, a snapshot in a file; see ``xlgraph.runtime.host_maps``)."""
    return isinstance(a, np.memmap) and a.nbytes >= SPILL_BYTES


def _check_memmap(x: np.memmap, dtype: Any, downcast: bool) -> None:
    """PopXL's checks of a memmap kept as a variable's host data (no copy, so no cast): the
    messages start with PopXL's sentences, which programs match."""
    got = f" Got a {dtypes.of_array(x).name} map of shape {x.shape}."
    if dtype is not None and dtypes.as_dtype(dtype).as_numpy() != x.dtype:
        raise MemmapError("When passing a memory-mapped NumPy array, the `dtype` parameter "
                          f"must be None or the same as the array's dtype (dtype={dtype}).{got}")
    if not (x.flags.c_contiguous and x.flags.aligned):
        raise MemmapError("When passing a memory-mapped NumPy array, it must already be in "
                          f"C-ordered and aligned form.{got}")
    if downcast and x.dtype in (np.float64, np.int64, np.uint64):
        raise MemmapError(f"When passing a memory-mapped NumPy array, the dtype {dtype} is "
                          f"not supported, as it requires downcasting, which would copy it.{got} "
                          f"Pass downcast=False, or a map of a 32-bit dtype.")


def _to_fp8(data: Any, dt: dtypes.dtype, log2_scale: int | None, nan_on_overflow: bool | None,
            copy: bool) -> np.ndarray:
    from xlgraph.fp8_utils import as_fp8_array

    arr = as_fp8_array(data, dt)
    if arr is not None:
        return arr.copy() if copy else arr
    return host_pow2scale_cast_to_fp8(data, dt, log2_scale or 0,
                                      True if nan_on_overflow is None else nan_on_overflow)


def table_to_string(rows: Sequence[Sequence[Any]], delimiter: str = " | ",
                    header: bool = True) -> str:
    """Rows as aligned text columns; with ``header`` a rule follows the first row."""
    cells = [[str(c) for c in row] for row in rows]
    if not cells:
        return ""
    widths = [max(len(r[i]) for r in cells if i < len(r)) for i in range(max(map(len, cells)))]
    lines = [delimiter.join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    if header:
        lines.insert(1, "-" * len(delimiter.join("x" * w for w in widths)))
    return "\n".join(lines)
