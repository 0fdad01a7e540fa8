"""The kernels of float16 kept in float32 storage (``xlgraph.lower.wide_half``).

``ROUND_HALF`` rounds float32 values to the nearest float16 (ties to even, past the range to
infinity) and keeps them as float32: ``x.astype(float16).astype(float32)``, in one pass (a
compiled loop of the numba backend, which fuses into segments). ``NARROW_HALF`` gives the
float16 array of float32 values that are float16 already (an exact conversion), ``WIDEN_HALF``
the float32 copy of a float16 array (exact) that several steps read. None is an op of the
library: the lowering puts them into plans, never graphs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xlgraph.core.op import OpDef
from xlgraph.core.tensor import TensorSpec
from xlgraph.ops import half

__all__ = ["ROUND_HALF", "NARROW_HALF", "WIDEN_HALF", "to_half_precision", "round_loop", "load",
           "store", "real"]

_F16, _F32 = np.dtype(np.float16), np.dtype(np.float32)


def to_half_precision(v):  # noqa: ANN001, ANN201 - numba compiles it (an overload)
    """float32 ``v`` rounded to float16 precision; the numba backend compiles it to
    ``fpext(fptrunc(v))``, keeping a NaN's payload as ``astype`` does."""
    return np.float32(np.float16(v))


def load(a, i):  # noqa: ANN001, ANN201 - numba compiles it (an overload)
    """Element ``i`` of 1-d array ``a`` for float arithmetic; compiled, the uint16 bits of a
    float16 array (``bits`` loops, ``xlgraph.ops.half``) load as their float32 value."""
    return a[i]


def store(a, i, v):  # noqa: ANN001, ANN201
    """``a[i] = v``; compiled, into float16 bits (uint16) rounded to nearest even, or into the
    words (uint32) of a float32 array rounded to float16 precision."""
    a[i] = v


def real(a, v):  # noqa: ANN001, ANN201
    """``v`` in the arithmetic dtype of array ``a``: its own, float32 for float16 bits and
    float32 words."""
    return a.dtype.type(v)


def round_loop(x, out):  # noqa: ANN001, ANN201
    """``out[i] = to_half_precision(x[i])`` over C-contiguous float32 arrays. In place (``out``
    is ``x``: wide storage rounds a producer's result where it lies) it is a loop over the one
    array, which the compiler vectorises; two names for it leave it a scalar loop ten times
    slower (784 x 512: 1.7 against 0.15 ms)."""
    xs, outs = x.reshape(-1), out.reshape(-1)
    if outs.ctypes.data == xs.ctypes.data:
        for i in range(xs.size):
            xs[i] = to_half_precision(xs[i])
    else:
        for i in range(xs.size):
            outs[i] = to_half_precision(xs[i])


def _round(x: np.ndarray) -> np.ndarray:
    out = np.empty(np.shape(x), _F32)
    return _round_out(x, out=out)


def _round_out(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    return half.round_into(out, x)


def _round_form(ins: list[TensorSpec]) -> tuple[Any, tuple[Any, ...]] | None:
    if np.dtype(ins[0].dtype.as_numpy()) != _F32:
        return None
    return round_loop, ()


def _narrow(x: np.ndarray) -> np.ndarray:
    return _narrow_out(x, out=np.empty(np.shape(x), _F16))


def _narrow_out(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    half.narrow_into(out, x)
    return out


def _as(dtype: Any) -> Any:
    def infer(t: TensorSpec) -> TensorSpec:
        return TensorSpec(t.shape, dtype)
    return infer


# fresh C-ordered results; rounding element i reads x[i] first, so ``out`` may be ``x``
ROUND_HALF = OpDef("round_half", _as("float32"), _round, kernel_out=_round_out,
                   elementwise=True, loop=_round_form, c_contiguous=True, out_may_be_input=True)
NARROW_HALF = OpDef("narrow_half", _as("float16"), _narrow, kernel_out=_narrow_out,
                    elementwise=True, c_contiguous=True)
WIDEN_HALF = OpDef("widen_half", _as("float32"), half.widen,
                   kernel_out=lambda x, out: half.convert(x, _F32, out), elementwise=True)
