"""numpy's own BLAS ``gemm``, called from compiled loops (the numba backend).

``gemm`` stands for ``cblas_?gemm`` at an address (``gemm_address``: numpy's bundled OpenBLAS,
the 64-bit integer interface that numpy's wheels ship); the numba backend compiles it to a
direct call (``xlgraph.lower.backends.numba_blas``), and before that it is not meant to run.

``matmul_into`` is the 2-D matrix product of a fused segment (``xlgraph.lower.segments``): the
``gemm`` call that ``np.matmul`` makes for two matrices, so the same bits as the numpy kernel.
numba's own ``np.dot`` calls scipy's OpenBLAS instead, which multiplies the MNIST step's
``(8, 784) @ (784, 32)`` in 22 us against numpy's 8.5 (scipy 1.17.1's OpenBLAS 0.3.30, numpy
2.4.6's 0.3.31, one thread; 11.7 against 10.2 us for the weight gradient ``(784, 8) @ (8, 32)``).
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os
from typing import Any

import numpy as np

__all__ = ["GEMM_DTYPES", "gemm", "gemm_address", "matmul_into"]

_GEMM_NAMES = {np.dtype(np.float32): ("scipy_cblas_sgemm64_", "cblas_sgemm64_"),
               np.dtype(np.float64): ("scipy_cblas_dgemm64_", "cblas_dgemm64_")}
GEMM_DTYPES = frozenset(_GEMM_NAMES)


def gemm(fn: int, ta: int, tb: int, m: int, n: int, k: int, alpha: Any, a: np.ndarray,
         lda: int, b: np.ndarray, ldb: int, beta: Any, c: np.ndarray, ldc: int) -> None:
    """``c = alpha op(a) op(b) + beta c`` by the row-major BLAS routine at address ``fn``
    (``op`` transposes when ``ta``/``tb`` is 1); arrays stand for their first element."""
    raise NotImplementedError("gemm runs only compiled (the numba backend binds it)")


@functools.cache
def gemm_address(dtype: np.dtype) -> int | None:
    """The address of numpy's own BLAS ``cblas_?gemm`` for ``dtype`` (the 64-bit integer
    interface that numpy's wheels ship), or None where numpy has another BLAS."""
    names = _GEMM_NAMES.get(np.dtype(dtype), ())
    libs = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs", "*blas*")
    for path in sorted(glob.glob(libs)):
        try:
            lib = ctypes.CDLL(path)  # already loaded by numpy: the same handle
        except OSError:
            continue
        for name in names:
            fn = getattr(lib, name, None)
            if fn is not None:
                return ctypes.cast(fn, ctypes.c_void_p).value
    return None


def matmul_into(a, b, out, fn, one, zero):  # noqa: ANN001, ANN201 - numba infers the types
    """``out = a @ b`` for matrices (every dimension above 1: numpy multiplies vectors by
    ``gemv``), ``a`` and ``b`` C- or F-contiguous and ``out`` C-contiguous, by the ``gemm`` at
    ``fn`` with ``one`` and ``zero`` in the data's dtype. The call ``np.matmul`` makes: an
    operand with contiguous rows untransposed with its row stride, else transposed with its
    column stride. (numpy takes ``syrk`` for ``x @ x.T`` on one buffer; this stays ``gemm``.)"""
    m, k = a.shape
    n = b.shape[1]
    size = a.itemsize
    ta = 0 if a.strides[1] == size else 1
    tb = 0 if b.strides[1] == size else 1
    lda = (a.strides[1] if ta else a.strides[0]) // size
    ldb = (b.strides[1] if tb else b.strides[0]) // size
    gemm(fn, ta, tb, m, n, k, one, a, lda, b, ldb, zero, out, out.strides[0] // size)
