"""The ``numba`` backend: ops' loop forms compiled to machine code, cached on disk.

Each loop form is compiled for the argument types a program needs (``nopython``, no fast-math,
so float operations keep their IEEE order; ``loops.contracted`` ones may fuse a multiply and
an add) and numba's on-disk cache keeps the machine code
between processes: it is keyed by the loop form's source (file and function) and the argument
types, so a later process loads instead of compiling. The cache lives where numba puts it
(``__pycache__`` beside ``xlgraph/ops/loops.py``, or ``NUMBA_CACHE_DIR``).

A ``NumbaBackend`` holds its own dispatchers (one per loop form) and belongs to one Session;
only numba's knowledge of the loops' helpers is per process (``_register_helpers``).
numba itself is imported by the first compile, not when the backend is made, so a Session can
hand the compiling to a thread (``xlgraph.runtime.kernels``) and start at once.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from typing import Any

import numpy as np

from xlgraph.ops import adam_loops, loops, pairwise, softmax_loops
from xlgraph.ops.blas import GEMM_DTYPES, gemm_address, matmul_into
from xlgraph.ops.loops import Composite
from xlgraph.tensor import TensorSpec

# The loops keep the GIL (no ``nogil``): they take microseconds, and a call that releases it
# must win it back afterwards, which can wait when another Python thread wants it (JAX's or
# torch's threads, a data loader). With both in the process, MLP steps in us, releasing vs
# keeping it: inference b80 47.5 vs 46.1, training b8 30.8 vs 29.9, b256 293 vs 282 (medians).


def available() -> bool:
    """Whether numba is installed (without importing it: that takes about half a second)."""
    return importlib.util.find_spec("numba") is not None


@functools.cache
def _register_helpers() -> None:
    """Teach numba the loops' helpers (once per process, before the first compile):
    ``scale_pow2`` as integer arithmetic on the float's bits, ``exp32``, ``gelu_value32``,
    ``gelu_grad_value32``, ``row_stats``, ``softmax_loops``' ``row_max``, ``run_sum16``,
    ``exp_shifted`` (with fused multiply-adds) and ``softmax_grad_row``, ``loops.check_labels``,
    ``adam_loops.corrections`` and ``pairwise``'s sums as themselves (``pairwise.lane_sum``,
    ``softmax_loops.lane_sum16`` and ``lane_max`` as vector code, ``numba_lanes``),
    ``xlgraph.ops.blas.gemm`` as a call of numpy's BLAS (``numba_blas``); and install the
    compiled float16 conversions (``numba_half``)."""
    from llvmlite import ir
    from numba.extending import intrinsic, overload

    @intrinsic
    def _scale_pow2(typingctx: Any, p: Any, n: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            value, power = args
            wide = value.type != ir.FloatType()
            ity = ir.IntType(64 if wide else 32)
            bias, shift = (1023, 52) if wide else (127, 23)
            bits = builder.add(builder.fptosi(power, ity), ir.Constant(ity, bias))
            scale = builder.bitcast(builder.shl(bits, ir.Constant(ity, shift)), value.type)
            return builder.fmul(value, scale)

        return p(p, n), codegen

    overload(loops.scale_pow2)(lambda p, n: lambda p, n: _scale_pow2(p, n))
    overload(loops.exp32)(lambda t: loops.exp32)
    overload(loops.gelu_value32)(lambda v, a, b, one, top: loops.gelu_value32)
    overload(loops.gelu_grad_value32)(
        lambda g, v, a, b, one, c, d, top: loops.gelu_grad_value32)
    overload(loops.row_stats)(lambda xr, tmp, plan, pending, eps, one, width: loops.row_stats)
    overload(pairwise.run_sum)(lambda a, s, n: pairwise.run_sum)
    overload(pairwise.half_run)(lambda n: pairwise.half_run)
    overload(pairwise.row_sum)(lambda a, s, plan, pending: pairwise.row_sum)
    overload(pairwise.sum_plan)(lambda n: pairwise.sum_plan)
    overload(softmax_loops.row_max)(lambda xr: softmax_loops.row_max)
    overload(softmax_loops.run_sum16)(lambda a: softmax_loops.run_sum16)
    overload(softmax_loops.exp_shifted, jit_options={"fastmath": {"contract"}})(
        lambda xr, o, top: softmax_loops.exp_shifted)
    overload(loops.check_labels)(lambda labs, c: loops.check_labels)
    overload(softmax_loops.softmax_grad_row, inline="always")(
        lambda d, p, o, k: softmax_loops.softmax_grad_row)
    overload(adam_loops.corrections, inline="always")(
        lambda out, step, b1, b2, eps: adam_loops.corrections)
    from xlgraph.lower.backends import (  # noqa: F401 - numba_blas: gemm; numba_lanes: lanes
        numba_blas,
        numba_half,
        numba_lanes,
    )

    numba_half.install()  # float16 <-> float32 conversions for the float32-register ops


class NumbaBackend:
    """Compiles loop forms with numba; see the module docstring."""

    name = "numba"
    # Whether ``np.dot`` compiles in a segment: numba calls BLAS through scipy.
    blas = importlib.util.find_spec("scipy") is not None

    def __init__(self) -> None:
        if not available():
            raise ImportError("backend='numba' needs numba: pip install xlgraph[fast]")
        self._jitted: dict[Callable[..., Any], Any] = {}  # loop form -> its numba dispatcher
        self._matmul: dict[np.dtype, Any] = {}  # dtype -> ``matmul``'s result

    def jitted(self, fn: Callable[..., Any], parallel: bool = False) -> Any:
        """The numba dispatcher of a loop form (made once per backend); ``parallel`` loops
        (``xlgraph.ops.window_parallel``) run their ``prange`` on numba's threads where those
        wait by spinning, else in turn."""
        found = self._jitted.get(fn)
        if found is None:
            import numba

            _register_helpers()
            if parallel:
                from xlgraph.lower.backends import numba_parallel

                numba_parallel.bind()
                parallel = numba_parallel.threads_spin()
            contract = {"contract"} if getattr(fn, "contract", False) else False
            found = self._jitted[fn] = numba.njit(cache=True, error_model="numpy",
                                                  parallel=parallel, fastmath=contract)(fn)
        return found

    def kernel(self, loop: Callable[..., Any], ins: list[TensorSpec], outs: list[TensorSpec],
               attrs: dict[str, Any]) -> tuple[Callable[..., Any], tuple[Any, ...]] | None:
        """The compiled loop form of one step (compiled now, for C-contiguous arguments of
        these specs; other argument types compile when first met), or None."""
        found = loop(ins, **attrs)
        if found is None:
            return None
        import numba

        fn, extra = found
        if isinstance(fn, Composite):  # Python calling compiled loops (compiled when first met)
            compiled = {name: self.jitted(loop, fn.parallel) for name, loop in fn.loops.items()}
            return functools.partial(fn.fn, **fn.kwargs, **compiled), extra
        dispatcher = self.jitted(fn)
        types = [numba.typeof(np.empty(s.shape, s.dtype.as_numpy())) for s in (*ins, *outs)]
        dispatcher.compile(tuple(types + [numba.typeof(x) for x in extra]))
        return dispatcher, extra

    def matmul(self, dtype: np.dtype) -> tuple[Any, tuple[Any, ...]] | None:
        """A segment's 2-D matrix product: ``xlgraph.ops.blas.matmul_into`` compiled (called as
        ``fn(a, b, out, *extra)``), which calls numpy's own ``gemm`` (the address, one and zero
        of ``dtype`` in ``extra``); None where numpy's BLAS is not found."""
        dtype = np.dtype(dtype)
        if dtype not in self._matmul:  # one set of constants: the segments share their names
            address = gemm_address(dtype) if dtype in GEMM_DTYPES else None
            self._matmul[dtype] = None if address is None else (
                self.jitted(matmul_into), (address, dtype.type(1), dtype.type(0)))
        return self._matmul[dtype]

    def fuse(self, fn: Callable[..., Any], args: list[np.ndarray]) -> Any:
        """``fn`` (a generated segment: Python calling this backend's dispatchers and
        ``np.dot``) compiled for the types of ``args``, or None where numba cannot compile it.
        Not cached on disk: the source is generated (a Session compiles its segments once)."""
        import numba

        dispatcher = numba.njit(error_model="numpy")(fn)
        try:
            dispatcher.compile(tuple(numba.typeof(a) for a in args))
        except Exception:  # noqa: BLE001 - numba's typing and lowering errors: keep the lines
            return None
        return dispatcher

    def direct(self, fn: Any, args: list[Any]) -> Callable[..., Any] | None:
        """The compiled entry point of dispatcher ``fn`` for the types of ``args`` (the arrays
        a generated line will always pass: pool buffers, variables): it skips the dispatcher's
        type matching, about 0.4 us per call. None when no such overload is compiled."""
        overloads = getattr(fn, "overloads", None)  # None: a Composite's Python function
        if overloads is None:
            return None
        import numba

        found = overloads.get(tuple(numba.typeof(a) for a in args))
        return None if found is None else found.entry_point
