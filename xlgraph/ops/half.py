"""float16 in float32 registers, rounded on store: the IPU's AMP units' arithmetic.

An op whose record sets ``OpDef.widen_half`` computes on float16 inputs in float32 and rounds
each float16 result once, when it is stored, instead of running numpy's float16 loops (which
convert every element in and out of float32 for every pass, many times slower than float32,
and round every intermediate of a multi-pass kernel to float16). ``half_form(defn, ins, outs)``
gives the record the lowering and the interpreter run for one op: ``defn`` itself when no input
is float16, else a copy whose ``kernel``, ``kernel_out`` and ``loop`` widen the float16 inputs,
run the float32 kernel (or the compiled float32 loop form) and narrow the float16 outputs.
One ufunc (``add``, ``exp``) gives the same bits either way: numpy's float16 loops compute each
element in float32 and round it; kernels of several passes (GELU, LayerNorm, softmax, sums) now
round once, so they are at least as accurate as before.

The conversions are exact (float16 to float32) and round to nearest even (float32 to float16),
as ``ndarray.astype`` does; the compiled backend installs vectorised ones
(``use_converters``) that give the same bits about ten times faster than numpy's casts.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from xlgraph import dtypes
from xlgraph.core.op import OpDef
from xlgraph.core.tensor import TensorSpec
from xlgraph.ops.loops import Composite

__all__ = ["half_form", "wide_form", "widen", "narrow_into", "use_converters", "convert",
           "round_into", "always_exact", "as_bits", "bits_parts"]

_F16, _F32 = np.dtype(np.float16), np.dtype(np.float32)
# Contiguous converters ``(source, destination)`` over 1-d uint16/float32 views, or None: numpy.
_FAST: dict[str, Callable[[np.ndarray, np.ndarray], None] | None] = {
    "widen": None, "narrow": None, "round": None}


def use_converters(widen_fn: Callable[[np.ndarray, np.ndarray], None],
                   narrow_fn: Callable[[np.ndarray, np.ndarray], None],
                   round_fn: Callable[[np.ndarray, np.ndarray], None] | None = None) -> None:
    """Install conversion loops ``widen_fn(uint16 bits, float32 out)`` and ``narrow_fn(float32,
    uint16 bits out)`` over 1-d C-contiguous arrays, bit for bit ``astype``'s, and
    ``round_fn(float32, float32 out)``: both in one pass."""
    _FAST["widen"], _FAST["narrow"], _FAST["round"] = widen_fn, narrow_fn, round_fn


# Temporaries reuse one growing buffer per slot and thread: glibc maps allocations of 32 MB and
# more afresh each time, and touching a new 32 MB costs 5-10 ms of page faults (the float16
# logits of the transformer, 1024 x 8192, widened); smaller ones then sit in memory the last
# op touched. The buffers keep the largest temporary of each slot (a few, per thread).
_REUSE_BYTES = 4096
_TEMPS = threading.local()


def temp(shape: tuple[int, ...], slot: int) -> np.ndarray:
    """An uninitialised float32 array of ``shape`` for a temporary that dies before the kernel
    that asked returns; large ones share the buffer of ``slot`` (callers use distinct slots for
    the temporaries alive together)."""
    n = math.prod(shape)
    if n * 4 < _REUSE_BYTES:
        return np.empty(shape, _F32)
    buffers = getattr(_TEMPS, "buffers", None)
    if buffers is None:
        buffers = _TEMPS.buffers = {}
    found = buffers.get(slot)
    if found is None or found.size < n:
        found = buffers[slot] = np.empty(n, _F32)
    return found[:n].reshape(shape)


def _in_temp(a: Any) -> bool:
    buffers = getattr(_TEMPS, "buffers", {})
    return isinstance(a, np.ndarray) and any(np.may_share_memory(a, b) for b in buffers.values())


def widen(a: Any, slot: int | None = None) -> np.ndarray:
    """A float32 copy of float16 ``a``: C-contiguous, or F-contiguous where ``a`` is (a
    transposed matrix stays a transposed view for BLAS). Fresh, or with a ``slot`` in the
    temporary buffer of that slot (``temp``)."""
    a = np.asarray(a)
    fast = _FAST["widen"]
    if fast is None or a.size < 64:
        return a.astype(_F32, order="F" if _f_only(a) else "C")
    if _f_only(a):
        return widen(a.T, slot).T
    a = np.ascontiguousarray(a)  # a strided copy of two bytes an element, then the fast loop
    out = np.empty(a.shape, _F32) if slot is None else temp(a.shape, slot)
    fast(a.reshape(-1).view(np.uint16), out.reshape(-1))
    return out


def _f_only(a: np.ndarray) -> bool:
    return a.flags.f_contiguous and not a.flags.c_contiguous


def narrow_into(out: np.ndarray, value: Any) -> None:
    """``out[...] = value`` rounded to ``out``'s float16 (``value`` broadcasts). Under
    ``np.errstate(over="raise")`` (``enableFloatingPointChecks``) a result past float16's range
    raises, as numpy's float16 arithmetic did."""
    value = np.asarray(value)
    fast = _FAST["narrow"]
    if (fast is None or value.dtype != _F32 or value.shape != out.shape or value.size < 64
            or not out.flags.c_contiguous or np.geterr()["over"] == "raise"):
        np.copyto(out, value, casting="unsafe")  # numpy's cast: raises an overflow if trapped
        return
    fast(np.ascontiguousarray(value).reshape(-1), out.reshape(-1).view(np.uint16))


def convert(a: np.ndarray, dtype: Any, out: np.ndarray | None = None) -> np.ndarray:
    """``a.astype(dtype, order="C")`` (into ``out`` when given), through the fast converters
    between float16 and float32."""
    dtype = np.dtype(dtype)
    fast = _FAST["widen"]
    if out is not None and a.dtype == _F16 and dtype == _F32 and fast is not None and (
            a.flags.c_contiguous and out.flags.c_contiguous and a.size >= 64):
        fast(a.reshape(-1).view(np.uint16), out.reshape(-1))
        return out
    if out is not None and dtype == _F16:
        narrow_into(out, a)
        return out
    if out is not None:
        np.copyto(out, a, casting="unsafe")
        return out
    if a.dtype == _F16 and dtype == _F32:
        return widen(a)
    if a.dtype == _F32 and dtype == _F16:
        out = np.empty(a.shape, _F16)
        narrow_into(out, a)
        return out
    return a.astype(dtype, order="C")


def always_exact(attrs: dict[str, Any]) -> bool:  # noqa: ARG001 - ``OpDef.half_exact``
    """``OpDef.half_exact`` of an op whose results are its inputs' elements whatever its
    attributes (``relu``, ``max_pool``)."""
    return True


def round_into(out: np.ndarray, x: Any) -> np.ndarray:
    """``out[...] = x`` (float32) rounded to float16 precision, kept in float32 (``out`` may be
    ``x``): ``x.astype(float16).astype(float32)``."""
    x = np.asarray(x)
    fast = _FAST["round"]
    if (fast is not None and x.size >= 64 and x.shape == out.shape and x.dtype == _F32
            and x.flags.c_contiguous and out.flags.c_contiguous):
        fast(x.reshape(-1), out.reshape(-1))
        return out
    bits = np.empty(out.shape, _F16)
    narrow_into(bits, x)
    np.copyto(out, bits)  # exact
    return out


def _is_half(spec: TensorSpec) -> bool:
    return np.dtype(spec.dtype.as_numpy()) == _F16


def half_form(defn: OpDef, ins: list[TensorSpec], outs: list[TensorSpec]) -> OpDef:
    """``defn``, or its float32-register form when it opts in and an input is float16."""
    if not defn.widen_half or defn.replica != "local" or not any(_is_half(s) for s in ins):
        return defn
    return wide_form(defn, ins, outs)


def wide_form(defn: OpDef, ins: list[TensorSpec], outs: list[TensorSpec],
              rounds: tuple[bool, ...] = ()) -> OpDef:
    """``half_form`` of an op that opts in, for operands stored as ``ins``/``outs`` say: some
    float16 values may be held in float32 (``xlgraph.lower.wide_half``), so the form widens the
    inputs still float16 and narrows the outputs still float16; ``rounds`` marks float32
    outputs holding float16 values, which the form rounds to float16 precision as it stores
    them (a ``loops.bits`` loop element by element, in its one pass). ``defn`` itself when
    there is nothing to do."""
    rounds = tuple(rounds) or (False,) * len(outs)
    if not any(_is_half(s) for s in (*ins, *outs)) and not any(rounds):
        return defn
    return _wide(defn, tuple(_is_half(s) for s in ins), tuple(_is_half(s) for s in outs), rounds)


def as_bits(spec: TensorSpec) -> TensorSpec:
    """``spec``, or for a float16 tensor the spec of its bits (uint16) that ``loops.bits``
    loops take."""
    return TensorSpec(spec.shape, dtypes.uint16) if _is_half(spec) else spec


def bits_parts(fn: Any) -> tuple[Callable[..., None], tuple[Any, ...]] | None:
    """For a backend's compiled form of a wide ``loops.bits`` loop (``_bits_call`` bound to
    its loop), the compiled loop and, per array argument, the dtype it views that array as
    (``uint16``: float16 bits; ``uint32``: float32 rounded on store) or None; else None."""
    if not (isinstance(fn, functools.partial) and fn.func is _bits_call):
        return None
    kw = fn.keywords
    return kw["_loop"], _bits_views(kw["wide_in"], kw["wide_out"], kw["rounds"])


def _bits_views(wide_in: tuple[bool, ...], wide_out: tuple[bool, ...],
                rounds: tuple[bool, ...]) -> tuple[Any, ...]:
    return (*(np.uint16 if w else None for w in wide_in),
            *(np.uint16 if w else np.uint32 if r else None for w, r in zip(wide_out, rounds)))


def _widened(arrays: tuple[Any, ...], wide_in: tuple[bool, ...]) -> list[Any]:
    """The inputs, float16 ones widened into temporaries (slots 0, 1, ...)."""
    return [widen(a, i) if w else a for i, (a, w) in enumerate(zip(arrays, wide_in))]


def _store(result: Any, wide_out: tuple[bool, ...], rounds: tuple[bool, ...],
           out: Any = None) -> Any:
    """The kernel's float32 ``result`` rounded on store: into ``out`` (a buffer or a tuple of
    them) when given, else into fresh float16 arrays where ``wide_out`` says so (fresh float32
    ones, rounded to float16 precision, where ``rounds`` does)."""
    many = isinstance(result, tuple)
    results = result if many else (result,)
    outs = (out if isinstance(out, tuple) else (out,)) if out is not None else (None,) * len(
        results)
    stored = []
    for r, o, w, rd in zip(results, outs, wide_out, rounds):
        if o is None:
            o = np.empty(np.shape(r), _F16 if w else _F32) if w or rd else None
        if o is None:  # not float16: the kernel's result (a copy if it is a temporary)
            stored.append(np.array(r) if _in_temp(r) else r)
        else:
            if rd:
                round_into(o, r)
            elif w or o.dtype == _F16:
                narrow_into(o, r)
            else:
                np.copyto(o, r, casting="unsafe")
            stored.append(o)
    return tuple(stored) if many else stored[0]


@functools.cache
def _wide(defn: OpDef, wide_in: tuple[bool, ...], wide_out: tuple[bool, ...],
          rounds: tuple[bool, ...]) -> OpDef:
    kernel, place = defn.kernel, defn.inplace_of

    def wide_kernel(*arrays: Any, **attrs: Any) -> Any:
        args = _widened(arrays, wide_in)
        if place is not None and not wide_in[place]:
            args[place] = np.array(arrays[place])  # the kernel writes into it: a copy
        result = kernel(*args, **attrs)
        if place is not None:  # in place: the result goes back into the input
            return _store(result, wide_out, rounds, arrays[place])
        return _store(result, wide_out, rounds)

    # Outputs all held in float32 (``xlgraph.lower.wide_half``): the kernel writes them itself.
    direct = (defn.kernel_out is not None and place is None and not defn.scratch
              and not any(wide_out))

    def wide_out_kernel(*arrays: Any, out: Any, scratch: Any = None, **attrs: Any) -> Any:
        args = _widened(arrays, wide_in)
        if direct:
            found = defn.kernel_out(*args, out=out, **attrs)
            for o, r in zip(out if isinstance(out, tuple) else (out,), rounds):
                if r:
                    round_into(o, o)
            return found
        if place is not None and not wide_in[place]:
            args[place] = np.array(arrays[place])
        return _store(kernel(*args, **attrs), wide_out, rounds, out)

    loop = defn.loop

    def wide_loop(ins: list[TensorSpec], **attrs: Any) -> Any:
        found = loop([TensorSpec(s.shape, dtypes.float32) if w else s
                      for s, w in zip(ins, wide_in)], **attrs)
        if found is None:
            return None
        fn, extra = found
        marks = {"wide_in": wide_in, "wide_out": wide_out, "rounds": rounds}
        if isinstance(fn, Composite):
            inner: dict[str, Any] = {"inner": fn.fn, "inner_kwargs": fn.kwargs}
            return Composite(_loop_call, {**inner, **marks}, fn.loops, fn.parallel), extra
        call = _bits_call if getattr(fn, "bits", False) else _loop_call
        return Composite(call, marks, {"_loop": fn}), extra

    for fn in (wide_kernel, wide_out_kernel):
        fn.__name__ = fn.__qualname__ = f"{defn.name}_in_float32"
    return defn.derived(
        kernel=wide_kernel,
        kernel_out=None if defn.kernel_out is None else wide_out_kernel,
        loop=None if loop is None else wide_loop, scratch=0, replicated=None,
        c_contiguous=place is None and all(wide_out),  # fresh float16 results (np.empty)
        # an elementwise result may go into a dying input's buffer, as the float32 kernel's does
        out_may_be_input=defn.elementwise and (_elementwise_ufunc(defn.kernel_out)
                                               or defn.out_may_be_input))


def _elementwise_ufunc(fn: Any) -> bool:
    return isinstance(fn, np.ufunc) and fn.signature is None and fn.nout == 1


def _loop_call(*args: Any, wide_in: tuple[bool, ...], wide_out: tuple[bool, ...],
               rounds: tuple[bool, ...], inner: Callable[..., Any] | None = None,
               inner_kwargs: dict | None = None, **compiled: Any) -> None:
    """A compiled float32 loop form run on float16 arrays: ``args`` are the inputs, the
    outputs and the loop's constants."""
    n_in, n_out = len(wide_in), len(wide_out)
    ins = _widened(args[:n_in], wide_in)
    outs = args[n_in:n_in + n_out]
    tmp = [temp(o.shape, n_in + i) if w else o for i, (o, w) in enumerate(zip(outs, wide_out))]
    if inner is None:
        compiled["_loop"](*ins, *tmp, *args[n_in + n_out:])
    else:
        inner(*ins, *tmp, *args[n_in + n_out:], **(inner_kwargs or {}), **compiled)
    for o, t, w, r in zip(outs, tmp, wide_out, rounds):
        if w:
            narrow_into(o, t)
        elif r:
            round_into(o, o)


def _bits_call(*args: Any, wide_in: tuple[bool, ...], wide_out: tuple[bool, ...],
               rounds: tuple[bool, ...], _loop: Callable[..., None]) -> None:
    """A compiled ``loops.bits`` loop run on float16 arrays as their uint16 bits (and float32
    outputs rounded on store as uint32 words): widened, computed and rounded element by
    element in one pass (the bits of ``_loop_call``)."""
    views = _bits_views(wide_in, wide_out, rounds)
    _loop(*(a if v is None else a.view(v) for a, v in zip(args, views)), *args[len(views):])
