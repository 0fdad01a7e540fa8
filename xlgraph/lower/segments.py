"""Segments: consecutive compiled calls of a generated step run as one compiled function.

With ``fuse`` and a backend that compiles (numba), the step writer queues each compiled loop
call and each small 2-D matrix product here instead of writing its line. The first line that
is not fused (or a call at another indent, or a second call that can raise) flushes the queue:
several calls become one function (``g0``, ``g1``, ...) and one call of it; a lone call, or a
segment the backend does not compile, goes back to its own line. A segment holds at most one
op that can raise (``loops.RAISING``), so the line, and the error, still names that op. A step
compiles at most ``FUSED_CALLS_MAX`` calls: numba's compile time grows with them. A segment
that repeats an earlier one of the step (a model's next layer: the same calls, constants and
argument types, other arrays) reuses its compiled function and costs no compile time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from xlgraph.lower import annotate
from xlgraph.lower.backends import Backend
from xlgraph.lower.program import Step
from xlgraph.op import Op

# The step's array names (``h``: a float16 array's bits or a float32 array's words, ``bits_view``).
_ARRAY_NAME = re.compile(r"\b[bwnsvch]\d+\b")
# The largest matrix product (multiply-adds) a segment takes: past it, one call's overhead is
# lost in the product. A segment multiplies matrices with numpy's own ``gemm`` (the numpy
# kernel's call and bits); without numpy's OpenBLAS, or for a vector, with numba's ``np.dot``,
# which calls scipy's OpenBLAS: slower for some shapes (scipy 1.17.1, float32, one thread:
# 8x784 @ 784x32 22 against numpy's 8.5 us; 80x784 @ 784x32 50 against 67).
FUSED_MATMUL_MAX = 1 << 20
# The most calls one generated step fuses. numba compiles a segment in time growing with its
# calls (each links its callees' code: 30 calls 1.6 s, 58 calls 4.7 s, 118 calls 11.8 s of CPU
# on the loaded 2-core machine), and a step holding hundreds of small compiled calls (a
# 100-layer MLP: about 400) spent 39 s of CPU compiling its segments, on the kernel thread or,
# without it, before the Session was ready. Past this budget the calls stay lines: each costs
# the 0.3 us of a direct call instead of a segment's share. The MNIST training step fuses 19.
FUSED_CALLS_MAX = 64


_NAME = re.compile(r"\b[A-Za-z_]\w*\b")


def _canonical(calls: list[FusedCall], params: list[str],
               namespace: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """The body of a segment of ``calls`` with its parameters renamed ``a0, a1, ...`` and
    the globals it reads ``k0, k1, ...`` in order of appearance, and ``{global: new name}``."""
    rename = {p: f"a{i}" for i, p in enumerate(params)}
    names: dict[str, str] = {}

    def sub(m: re.Match[str]) -> str:
        word = m.group()
        if word in rename:
            return rename[word]
        if word != "np" and word in namespace:
            return names.setdefault(word, f"k{len(names)}")
        return word

    return "".join(f"    {_NAME.sub(sub, f.text)}\n" for f in calls), names


def _value_key(value: Any) -> tuple[Any, ...]:
    """What a segment's global contributes to its key: a constant's dtype, shape and bytes (a
    compiled function freezes it), any other object itself (a compiled loop)."""
    if isinstance(value, np.ndarray | np.generic):
        return ("data", value.dtype.str, np.shape(value), np.asarray(value).tobytes())
    return ("object", id(value))


def _type_key(a: np.ndarray) -> tuple[Any, ...]:
    """What a compiled function is specialised on: dtype, rank, layout, writability."""
    f = a.flags
    return (a.dtype.str, a.ndim, f.c_contiguous, f.f_contiguous, f.writeable, f.aligned)


@dataclass(eq=False)
class FusedCall:
    """One call of a segment: ``text`` in the fused function, ``plain`` as a step line."""

    indent: int
    text: str
    plain: str
    op: Op
    raises: bool
    alone: bool = False  # worth a segment of its own (a loop over replicas)
    note: str | None = None  # the line's comment, if not ``op``'s (a loop of several ops)


class Segments:
    """The segments of one generated step.

    ``emit(indent, text, op, note=...)`` writes a step line, ``bind_global(prefix, value)``
    names a global of the step, ``sample(name)`` is an array of the type a name always holds
    (None: unknown), ``fixed`` maps the names that hold the same array in every run and
    ``typed`` holds the names of other arrays whose numba type is the sample's in every run
    (host data, which ``HostIO`` hands over C-contiguous, native and of the stream's shape, and
    views of it): a segment on only these skips numba's type dispatch (1.1 us of 2.3 for 22
    arrays), as a segment on fixed arrays does."""

    def __init__(self, backend: Backend | None, emit: Callable[..., None],
                 bind_global: Callable[[str, Any], str],
                 sample: Callable[[str], np.ndarray | None],
                 fixed: dict[str, np.ndarray], typed: set[str]) -> None:
        self.backend = backend
        self._emit, self._bind_global, self._sample, self._fixed = emit, bind_global, sample, fixed
        self._typed = typed
        self.queued: list[FusedCall] = []  # calls waiting to be fused
        self.namespace: dict[str, Any] = {"np": np}  # the segments' globals
        self.sources: list[str] = []
        self.budget = FUSED_CALLS_MAX  # calls this step may still compile into segments
        self.compiled: dict[tuple[Any, ...], Any] = {}  # segment key -> its compiled function

    def matmul_call(self, s: Step, specs: Any, args: list[str], outs: list[str]) -> str | None:
        """The segment's call for a 2-D float matrix product into a buffer, of contiguous
        operands that are not that buffer, or None to keep its line: numpy's own ``gemm``
        (``backend.matmul``, the same bits as numpy's kernel) for matrices, else numba's
        ``np.dot`` (scipy's BLAS) where scipy is installed."""
        if not (self.backend is not None and not s.attrs and len(outs) == 1
                and getattr(s.defn.kernel_out, "blas_matmul", False)):
            return None
        shapes = [specs[x] for x in (*s.ins, *s.outs)]
        dtype = shapes[0].dtype.as_numpy()
        if any(len(x.shape) != 2 or x.dtype.as_numpy() != dtype for x in shapes) or (
                np.dtype(dtype) not in (np.float32, np.float64)
                or math.prod(shapes[0].shape) * shapes[1].shape[1] > FUSED_MATMUL_MAX):
            return None
        samples = [self._sample(a) for a in args]
        out = self._fixed[outs[0]]
        if not (out.flags.c_contiguous and all(
                a is not None and (a.flags.c_contiguous or a.flags.f_contiguous)
                and not np.may_share_memory(a, out) for a in samples)):
            return None
        matrices = all(d > 1 for x in shapes[:2] for d in x.shape)
        found = self.backend.matmul(dtype) if matrices else None
        if found is None:
            return f"np.dot({args[0]}, {args[1]}, {outs[0]})" if self.backend.blas else None
        fn, extra = found
        values = [fn, *extra]
        names = [self._bind_global("j_matmul" if i == 0 else "x_matmul", x)
                 for i, x in enumerate(values)]
        self.namespace.update(zip(names, values))
        return f"{names[0]}({', '.join([*args, outs[0], *names[1:]])})"

    def add(self, call: FusedCall) -> None:
        """Queue ``call`` for the current segment (a new one at another indent, when both
        it and the segment can raise, or when the segment holds the calls left to fuse)."""
        if self.queued and (self.queued[0].indent != call.indent
                            or call.raises and any(f.raises for f in self.queued)
                            or len(self.queued) >= max(self.budget, 1)):
            self.flush()
        self.queued.append(call)

    def flush(self) -> None:
        """Emit the queued calls: as one segment call when there are several and it compiles,
        else line by line."""
        calls, self.queued = self.queued, []
        if not calls:
            return
        worth = len(calls) > 1 or calls[0].alone
        call = self._compile(calls) if worth and len(calls) <= self.budget else None
        if call is None:
            for f in calls:
                self._emit(f.indent, f.plain, f.op, note=f.note)
            return
        op = next((f.op for f in calls if f.raises), calls[0].op)
        note = " | ".join(f.note or annotate.op_comment(f.op) for f in calls)
        self._emit(calls[0].indent, call, op, note=f"fused: {note}")

    def _compile(self, calls: list[FusedCall]) -> str | None:
        """The step's line that calls ``calls`` fused into one compiled function, or None
        when some argument's type is unknown or the backend does not compile it. A segment
        that repeats an earlier one (the same calls on arguments of the same types, the same
        constants: a model's next layer) reuses its compiled function."""
        params = list(dict.fromkeys(n for f in calls for n in _ARRAY_NAME.findall(f.text)))
        samples = [self._sample(p) for p in params]
        if any(a is None for a in samples) or self.backend is None:
            return None
        name = f"g{len(self.sources)}"
        body, names = _canonical(calls, params, self.namespace)
        key = (body, tuple(_value_key(self.namespace[g]) for g in names),
               tuple(_type_key(a) for a in samples))
        fn = self.compiled.get(key)
        if fn is None:
            canonical = {"np": np, **{c: self.namespace[g] for g, c in names.items()}}
            source = f"def {name}({', '.join(f'a{i}' for i in range(len(params)))}):\n{body}"
            code = compile(source, f"<xlgraph-segment-{name}>", "exec")
            exec(code, canonical)  # noqa: S102 - generated as the step is, names only
            fn = self.backend.fuse(canonical[name], samples)
            if fn is None:
                return None
            self.compiled[key] = fn
            self.budget -= len(calls)  # only compiling costs time
        fixed = all(p in self._fixed or p in self._typed for p in params)
        direct = self.backend.direct(fn, samples) if fixed else None
        self.sources.append(f"def {name}({', '.join(params)}):\n" + "".join(
            f"    {f.text}\n" for f in calls))
        return f"{self._bind_global(name, fn if direct is None else direct)}({', '.join(params)})"

    def comments(self) -> list[str]:
        """The segments' source, as comment lines to follow the step's."""
        return [f"# {line}".rstrip() for source in self.sources
                for line in ["", f"segment {source.split('(')[0][4:]}, compiled:",
                             *source.splitlines()]]
