"""float16 conversions for the ``numba`` backend: LLVM's ``fpext``/``fptrunc`` of ``half``.

numba has no float16 type, so the loops take float16 arrays as their uint16 bits and convert
each element with an intrinsic that reinterprets the bits as LLVM's ``half``: on a CPU with
F16C the compiler turns the loops into ``vcvtph2ps``/``vcvtps2ph``, eight elements an
instruction (3 ms for 8 M elements each way, against 25-33 ms for numpy's casts). The results
are ``astype``'s bits: exact widening, rounding to nearest even, overflow to infinity, and NaN
payloads kept as numpy keeps them (the conversion instructions set a signalling NaN's quiet
bit, so a NaN is converted apart, with a select that does not stop vectorising).
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


_I16, _I32 = ir.IntType(16), ir.IntType(32)


@intrinsic
def _bits_to_float(typingctx: Any, u: Any) -> Any:
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        h = args[0]
        wide = builder.bitcast(builder.fpext(builder.bitcast(h, ir.HalfType()), ir.FloatType()),
                               _I32)
        # fpext quiets a signalling NaN (sets the quiet bit); astype keeps its bits
        signalling = builder.and_(
            builder.icmp_unsigned("==", builder.and_(h, _I16(0x7E00)), _I16(0x7C00)),
            builder.icmp_unsigned("!=", builder.and_(h, _I16(0x01FF)), _I16(0)))
        kept = builder.select(signalling, builder.and_(wide, _I32(0xFFBFFFFF)), wide)
        return builder.bitcast(kept, ir.FloatType())

    return types.float32(types.uint16), codegen


@intrinsic
def _float_to_bits(typingctx: Any, f: Any) -> Any:
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        x = args[0]
        narrow = builder.bitcast(builder.fptrunc(x, ir.HalfType()), _I16)
        # a NaN as astype narrows it: its sign and top 10 payload bits, unquieted (1 when
        # those are 0, so that it stays a NaN); fptrunc sets the quiet bit
        bits = builder.bitcast(x, _I32)
        sign = builder.trunc(builder.and_(builder.lshr(bits, _I32(16)), _I32(0x8000)), _I16)
        payload = builder.trunc(builder.and_(builder.lshr(bits, _I32(13)), _I32(0x3FF)), _I16)
        payload = builder.select(builder.icmp_unsigned("==", payload, _I16(0)), _I16(1), payload)
        nan = builder.or_(builder.or_(sign, _I16(0x7C00)), payload)
        return builder.select(builder.fcmp_unordered("uno", x, x), nan, narrow)

    return types.uint16(types.float32), codegen


@intrinsic
def _rounded(typingctx: Any, f: Any) -> Any:
    """float32 to float16 precision, kept in float32: ``_bits_to_float(_float_to_bits(x))``
    in fewer instructions (the conversions, and a NaN handled apart in float32's bits)."""
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        x = args[0]
        wide = builder.fpext(builder.fptrunc(x, ir.HalfType()), ir.FloatType())
        # a NaN as astype rounds it: sign and top 10 payload bits, unquieted, 1 if those are 0
        bits = builder.bitcast(x, _I32)
        empty = builder.icmp_unsigned("==", builder.and_(bits, _I32(0x007FE000)), _I32(0))
        nan = builder.or_(builder.and_(bits, _I32(0xFFFFE000)),
                          builder.select(empty, _I32(0x2000), _I32(0)))
        return builder.select(builder.fcmp_unordered("uno", x, x),
                              builder.bitcast(nan, ir.FloatType()), wide)

    return types.float32(types.float32), codegen


@intrinsic
def _float_to_word(typingctx: Any, f: Any) -> Any:
    """A float32's bits as a uint32 word."""
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.bitcast(args[0], _I32)

    return types.uint32(types.float32), codegen


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
        out[i] = _rounded(x[i])


def _load(a, i):  # noqa: ANN001, ANN202 - numba reads the names (no annotations)
    if a.dtype == types.uint16:  # float16 bits
        return lambda a, i: _bits_to_float(a[i])
    return lambda a, i: a[i]


def _store(a, i, v):  # noqa: ANN001, ANN202
    if a.dtype == types.uint16:
        def bits(a, i, v):  # noqa: ANN001, ANN202
            a[i] = _float_to_bits(np.float32(v))
        return bits
    if a.dtype == types.uint32:
        def word(a, i, v):  # noqa: ANN001, ANN202
            a[i] = _float_to_word(_rounded(np.float32(v)))
        return word

    def value(a, i, v):  # noqa: ANN001, ANN202
        a[i] = v
    return value


def _real(a, v):  # noqa: ANN001, ANN202
    if a.dtype in (types.uint16, types.uint32):
        return lambda a, v: np.float32(v)
    return lambda a, v: a.dtype.type(v)


@functools.cache
def install() -> bool:
    """Check the loops against ``astype`` on a few values (a target without IEEE half
    conversions keeps numpy's casts), then install them; whether they are in use. The compiled
    ``to_half_precision`` is LLVM's conversions in any case (IEEE's, like the checked loops)."""
    overload(half_round.to_half_precision)(lambda v: lambda v: _rounded(v))
    overload(half_round.load, inline="always")(_load)
    overload(half_round.store, inline="always")(_store)
    overload(half_round.real, inline="always")(_real)
    probe = np.concatenate([  # finite, overflowing, infinite, and NaNs quiet and signalling
        np.array([1.0, -2.5, 65504.0, 1e5, 6e-8, 1 + 2.0 ** -11, np.inf], np.float32),
        np.array([0x7FC00000, 0xFF815466, 0x7F800001, 0x7FA00000], np.uint32).view(np.float32)])
    bits = np.empty(probe.size, np.uint16)
    narrow(probe, bits)
    back = np.empty(probe.size, np.float32)
    widen(bits, back)
    with np.errstate(over="ignore", invalid="ignore"):
        expected = probe.astype(np.float16)
        wide = expected.astype(np.float32).view(np.uint32)
    rounded = np.empty(probe.size, np.float32)
    round_half(probe, rounded)
    if not (np.array_equal(bits, expected.view(np.uint16))
            and np.array_equal(back.view(np.uint32), wide)
            and np.array_equal(rounded.view(np.uint32), wide)):
        return False
    half.use_converters(widen, narrow, round_half)
    return True
