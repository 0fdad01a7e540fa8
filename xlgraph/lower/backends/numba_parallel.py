"""What the numba backend adds for ``xlgraph.ops.window_parallel``'s loops: numba's ``prange``
bound to that module's name, its helpers made callable from compiled
code, and its ``gemm`` compiled as a call of the BLAS routine at a given address.

Imported by the backend when it compiles the first loop (numba is imported by then).
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic, overload, register_jitable

from xlgraph.ops import window_parallel


@intrinsic
def _call_gemm(typingctx: Any, fn: Any, order: Any, ta: Any, tb: Any, m: Any, n: Any, k: Any,
               alpha: Any, a: Any, lda: Any, b: Any, ldb: Any, beta: Any, c: Any,
               ldc: Any) -> Any:
    """``cblas_?gemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)`` through
    the function pointer ``fn``; arrays are passed as their data pointers."""
    args = (order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)

    def codegen(context: Any, builder: Any, signature: Any, values: Any) -> None:
        llargs, lltypes = [], []
        for ty, value in zip(args, values[1:]):
            if isinstance(ty, types.Array):
                value = builder.bitcast(
                    cgutils.create_struct_proxy(ty)(context, builder, value=value).data,
                    ir.IntType(8).as_pointer())
            llargs.append(value)
            lltypes.append(value.type)
        fnty = ir.FunctionType(ir.VoidType(), lltypes)
        builder.call(builder.inttoptr(values[0], fnty.as_pointer()), llargs)

    return types.void(fn, *args), codegen


@overload(window_parallel.gemm)
def _gemm(fn, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):  # noqa: ANN001, ANN202
    # (no annotations: numba compares this signature with the implementation's)
    def impl(fn, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):  # noqa: ANN001, ANN202
        _call_gemm(np.int64(fn), np.int32(101), np.int32(111 + ta), np.int32(111 + tb),
                   np.int64(m), np.int64(n), np.int64(k), alpha, a, np.int64(lda), b,
                   np.int64(ldb), beta, c, np.int64(ldc))  # 101: row-major, 111/112: (no) trans

    return impl


@functools.cache
def threads_spin() -> bool:
    """Whether numba's parallel loops run on a thread team that waits by spinning (TBB or
    OpenMP, whichever numba would pick): numba's fallback team sleeps between loops, and on
    virtual machines waking it costs more than a small loop (about 100 us per loop measured
    on the benchmark machine, against 2 us with OpenMP)."""
    layer = numba.config.THREADING_LAYER
    if layer == "workqueue":
        return False
    for name in ("tbbpool", "omppool"):
        try:
            importlib.import_module(f"numba.np.ufunc.{name}")
        except ImportError:
            continue
        return True
    return False


@functools.cache
def bind() -> None:
    """Point ``window_parallel``'s ``prange`` at numba's and let compiled code call its
    helpers (once per process: they are module globals)."""
    window_parallel.prange = numba.prange
    for helper in window_parallel.HELPERS:
        register_jitable(helper)
