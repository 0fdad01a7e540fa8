"""``xlgraph.ops.blas.gemm`` compiled: a call of the BLAS routine at the given address.

Imported by the numba backend before its first compile (``numba_backend._register_helpers``),
so that the convolution loops (``xlgraph.ops.window_parallel``) and the segments' matrix
products (``xlgraph.ops.blas.matmul_into``) can call numpy's own ``cblas_?gemm``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic, overload

from xlgraph.ops import blas


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


@overload(blas.gemm)
def _gemm(fn, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):  # noqa: ANN001, ANN202
    # (no annotations: numba compares this signature with the implementation's)
    def impl(fn, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):  # noqa: ANN001, ANN202
        _call_gemm(np.int64(fn), np.int32(101), np.int32(111 + ta), np.int32(111 + tb),
                   np.int64(m), np.int64(n), np.int64(k), alpha, a, np.int64(lda), b,
                   np.int64(ldb), beta, c, np.int64(ldc))  # 101: row-major, 111/112: (no) trans

    return impl
