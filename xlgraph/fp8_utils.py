"""Host-side fp8 conversions with a power-of-two scale (needs the ``fp8`` extra).

xlgraph holds fp8 data as ``ml_dtypes`` arrays (``float8_e4m3fnuz`` for ``float8_143``,
``float8_e5m2fnuz`` for ``float8_152``: Graphcore's formats, exponent bias 8 and 16, one NaN
encoding ``0x80``, no infinities, no negative zero). Where PopXL hands fp8 data around as
``uint8`` arrays of the bits, xlgraph accepts those too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xlgraph import dtypes

__all__ = ["host_pow2scale_cast_to_fp8", "host_pow2scale_cast_from_fp8", "fp8_max",
           "as_fp8_array", "find_exponential_range", "log_histogram", "host_fp8_mse_scale",
           "host_fp8_mse_scale_pb"]


def _fp8_dtype(dtype: Any) -> dtypes.dtype:
    dt = dtypes.float8_143 if dtype is None else dtypes.as_dtype(dtype)
    if not dt.is_fp8:
        raise TypeError(f"expected float8_143 or float8_152, got {dt!r}")
    return dt


def fp8_max(dtype: Any) -> float:
    """The largest finite value of an fp8 dtype (240 for float8_143, 57344 for float8_152)."""
    return float(dtypes.require_ml_dtypes().finfo(_fp8_dtype(dtype).as_numpy()).max)


def as_fp8_array(data: Any, dtype: Any) -> np.ndarray | None:
    """``data`` as an fp8 array of ``dtype`` when it already holds fp8 data (an fp8 array, or
    ``uint8`` bits as PopXL stores fp8 on the host), else None."""
    want = _fp8_dtype(dtype).as_numpy()
    arr = np.asarray(data)
    if arr.dtype == want:
        return arr
    if arr.dtype == np.uint8:
        return arr.view(want)
    if arr.dtype.kind == "V":
        raise TypeError(f"fp8 data of dtype {arr.dtype} does not match {dtype!r}")
    return None


def host_pow2scale_cast_to_fp8(src: Any, dtype: Any = None, log2_scale: int = 0,
                               nan_on_overflow: bool = True) -> np.ndarray:
    """``cast(src * 2**log2_scale, dtype)`` on the host, rounding to nearest even.

    Args:
        src: float data.
        dtype: ``float8_143`` (None, the default) or ``float8_152``.
        log2_scale: the power of two to scale by before the cast.
        nan_on_overflow: values beyond the largest fp8 value become NaN (True) or saturate to
            it (False). NaN inputs stay NaN; the fp8 formats have no infinity.

    Returns:
        An fp8 ``ml_dtypes`` array (``.view(np.uint8)`` gives PopXL's bit representation).
    """
    want = _fp8_dtype(dtype).as_numpy()
    x = np.asarray(src, dtype=np.float64) * np.exp2(int(log2_scale))
    if not nan_on_overflow:
        big = fp8_max(dtype)
        x = np.clip(x, -big, big)
    return x.astype(want)


def host_pow2scale_cast_from_fp8(src: Any, dtype: Any = None,
                                 log2_scale: int = 0) -> np.ndarray:
    """``cast(src, dtype) * 2**log2_scale`` on the host.

    Args:
        src: fp8 data: an fp8 array (its format is its dtype), or ``uint8`` bits.
        dtype: the float dtype to return (float16, float32 or float64), as PopXL passes it;
            None gives float32. An fp8 dtype instead names the format of ``uint8`` bits in
            ``src`` (bits are ``float8_143`` otherwise).
        log2_scale: the power of two to scale by after the cast (pass minus the scale used
            when casting to fp8 to undo it).

    Returns:
        An array of ``dtype`` (float32 for None or an fp8 dtype).

    Raises:
        TypeError: ``dtype`` is not a float dtype, or ``src`` holds no fp8 data.
    """
    out = dtypes.float32 if dtype is None else dtypes.as_dtype(dtype)
    fmt = None
    if out.is_fp8:
        fmt, out = out, dtypes.float32
    elif not out.is_floating_point or out.is_complex:
        raise TypeError(f"host_pow2scale_cast_from_fp8: dtype must be a float dtype to cast "
                        f"to (float16, float32, float64), got {out!r}")
    if fmt is None:  # an fp8 array carries its format; bits are float8_143
        have = np.asarray(src).dtype
        fmt = next((f for f in (dtypes.float8_152,) if have == f.as_numpy()),
                   dtypes.float8_143)
    arr = as_fp8_array(src, fmt)
    if arr is None:
        raise TypeError(f"host_pow2scale_cast_from_fp8 needs fp8 data or uint8 bits, got "
                        f"{np.asarray(src).dtype}")
    wide = np.float64 if out is dtypes.float64 else np.float32
    return (arr.astype(wide) * wide(np.exp2(int(log2_scale)))).astype(out.as_numpy())


def find_exponential_range(fp_def: Any) -> tuple[int, int]:
    """``(lowest, highest)`` powers of two a float format represents: the exponent of its
    smallest subnormal and of its largest finite value (``(-10, 7)`` for ``float8_143``).

    Args:
        fp_def: a float dtype (xlgraph, numpy or ``ml_dtypes``).
    """
    dt = dtypes.as_dtype(fp_def)
    if not dt.is_floating_point:
        raise TypeError(f"find_exponential_range needs a float format, got {dt!r}")
    info = dtypes.require_ml_dtypes().finfo(dt.as_numpy())
    return int(np.floor(np.log2(float(info.smallest_subnormal)))), int(np.floor(np.log2(
        float(info.max))))


def log_histogram(src: Any, ftype: Any) -> tuple[np.ndarray, tuple[int, int]]:
    """Counts of ``src``'s nonzero finite values by power of two: ``counts[i]`` values have
    ``floor(log2(|x|)) == lowest + i`` over ``find_exponential_range(ftype)``.

    Returns:
        ``(counts, (lowest, highest))``.
    """
    low, high = find_exponential_range(ftype)
    x = np.abs(np.asarray(src, np.float64)).ravel()
    x = x[np.isfinite(x) & (x > 0)]
    exps = np.clip(np.floor(np.log2(x)).astype(np.int64), low, high) - low
    return np.bincount(exps, minlength=high - low + 1), (low, high)


def host_fp8_mse_scale(src: Any, dtype: Any = None) -> int:
    """The ``log2_scale`` for ``host_pow2scale_cast_to_fp8(src, dtype, log2_scale)`` whose
    round trip back to float has the least mean squared error (saturating, not NaN, on
    overflow); ties go to the smaller scale.

    Every scale that moves the data's largest magnitude within the fp8 range is tried.
    """
    fmt = _fp8_dtype(dtype)
    x = np.asarray(src, np.float64)
    finite = x[np.isfinite(x)]
    if finite.size == 0 or not np.any(finite):
        return 0
    top = float(np.max(np.abs(finite)))
    low, high = find_exponential_range(fmt)
    centre = high - int(np.floor(np.log2(top)))
    best, best_err = 0, np.inf
    for scale in range(centre - (high - low), centre + 2):
        fp8 = host_pow2scale_cast_to_fp8(finite, fmt, scale, nan_on_overflow=False)
        err = float(np.mean((host_pow2scale_cast_from_fp8(fp8, fmt, -scale) - finite) ** 2))
        if err < best_err:
            best, best_err = scale, err
    return best


def host_fp8_mse_scale_pb(src: Any, dtype: Any = None) -> int:
    """``host_fp8_mse_scale`` (PopXL's variant that runs in PopART's C++; one implementation
    here)."""
    return host_fp8_mse_scale(src, dtype)
