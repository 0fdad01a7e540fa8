"""float16 conversions for the ``numba`` backend: LLVM's ``fpext``/``fptrunc`` of ``half``.

numba has no float16 type, so the loops take float16 arrays as their uint16 bits and convert
each element with an intrinsic that reinterprets the bits as LLVM's ``half``: on a CPU with
F16C the compiler turns the loops into ``vcvtph2ps``/``vcvtps2ph``, eight elements an
instruction (3 ms for 8 M elements each way, against 25-33 ms for numpy's casts). The results
are ``astype``'s bits: exact widening, rounding to nearest even, overflow to infinity.
``install`` hands them to ``xlgraph.ops.half`` (same bits, so which one runs never shows), with
a loop rounding float32 to float16 precision (``fpext(fptrunc(x))``) for float16 values held in
float32 (``xlgraph.ops.half_round``), and compiles ``half_round.to_half_precision`` to it.
This module imports numba: the backend imports it when it compiles its first loop.
"""

from __future__ import annotations

import functools
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

from xlgraph.ops import half, half_round

__all__ = ["install"]


@intrinsic
def _bits_to_float(typingctx: Any, u: Any) -> Any:
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())

    return types.float32(types.uint16), codegen


@intrinsic
def _float_to_bits(typingctx: Any, f: Any) -> Any:
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), ir.IntType(16))

    return types.uint16(types.float32), codegen


_U16, _F32 = types.Array(types.uint16, 1, "C"), types.Array(types.float32, 1, "C")
# Sources may be read-only (a host-loaded input, a constant): a signature for each.
_U16_IN = [_U16, types.Array(types.uint16, 1, "C", readonly=True)]
_F32_IN = [_F32, types.Array(types.float32, 1, "C", readonly=True)]


@numba.njit([(u, _F32) for u in _U16_IN], cache=True, error_model="numpy")
def widen(bits, out):  # noqa: ANN001, ANN201 - numba infers the types
    """``out[i] = float32(half bits[i])``."""
    for i in range(bits.size):
        out[i] = _bits_to_float(bits[i])


@numba.njit([(f, _U16) for f in _F32_IN], cache=True, error_model="numpy")
def narrow(x, bits):  # noqa: ANN001, ANN201
    """``bits[i] = half bits of x[i]``, rounded to nearest even."""
    for i in range(x.size):
        bits[i] = _float_to_bits(x[i])


@numba.njit([(f, _F32) for f in _F32_IN], cache=True, error_model="numpy")
def round_half(x, out):  # noqa: ANN001, ANN201
    """``out[i] = float32(half(x[i]))``: ``x`` rounded to float16 precision, in one pass."""
    for i in range(x.size):
        out[i] = _bits_to_float(_float_to_bits(x[i]))


@functools.cache
def install() -> bool:
    """Check the loops against ``astype`` on a few values (a target without IEEE half
    conversions keeps numpy's casts), then install them; whether they are in use. The compiled
    ``to_half_precision`` is LLVM's conversions in any case (IEEE's, like the checked loops)."""
    overload(half_round.to_half_precision)(
        lambda v: lambda v: _bits_to_float(_float_to_bits(v)))
    probe = np.array([1.0, -2.5, 65504.0, 1e5, 6e-8, 1 + 2.0 ** -11, np.inf], np.float32)
    bits = np.empty(probe.size, np.uint16)
    narrow(probe, bits)
    back = np.empty(probe.size, np.float32)
    widen(bits, back)
    with np.errstate(over="ignore"):
        expected = probe.astype(np.float16)
    rounded = np.empty(probe.size, np.float32)
    round_half(probe, rounded)
    if not (np.array_equal(bits, expected.view(np.uint16))
            and np.array_equal(back, expected.astype(np.float32))
            and np.array_equal(rounded, expected.astype(np.float32))):
        return False
    half.use_converters(widen, narrow, round_half)
    return True
