"""Intel MKL's ``cblas_?gemm`` for the large float32 and float64 matrix products (optional).

With the ``mkl`` extra installed (``pip install xlgraph[mkl]``), ``matmul`` multiplies large
float32 and float64 matrices with MKL's ``gemm`` instead of numpy's OpenBLAS: on the products
of a GPT-2 small step, 1.1-1.25x numpy's rate at one thread (``benchmarks/README.md``, "Issue
48: MKL products"). MKL is loaded by the first such product, not by ``import xlgraph``.

``XLGRAPH_BLAS`` chooses: ``mkl`` (the default when the extra is installed), or ``openblas``
(numpy's own BLAS for every product). Without the extra, products stay numpy's, unless
``XLGRAPH_BLAS=mkl`` asks for MKL: then the Session says which extra is missing.

Which products: matrices (every dimension at least 2) of at least ``MIN_PRODUCT``
multiply-adds, whose operands each have one unit stride (C- or F-ordered matrices, transposed
views included, as BLAS's ``trans`` flags and leading dimensions take them) and a result with
unit column stride that shares no memory with them; everything else is numpy's. Below
``MIN_PRODUCT`` MKL wins on some shapes and loses on others (one thread, CPU time: ``(8, 512)
@ (512, 2048)`` 1.65x numpy's rate, ``(128, 512) @ (512, 128)`` 0.68x, the MLP's ``(256, 784)
@ (784, 32)`` 0.74x); from 2^26 on it is 0.9-1.4x. The numba backend's fused segments
multiply only products below ``MIN_PRODUCT`` (``xlgraph.lower.segments.FUSED_MATMUL_MAX``,
with numpy's ``gemm``), so a product of a given shape runs through the same BLAS whichever
backend computes it, fused or not, and gives the same bits.

MKL's results do not depend on the operands' alignment (checked), but the bits of a row of a
product may depend on the other dimensions (rows of ``(512, 3072) @ (3072, 768)`` differ from
the same rows multiplied alone), so a product's shape, not only its rows, decides its bits; as
numpy's, a batched product is one ``gemm`` per matrix. MKL runs in its strict conditional
numerical reproducibility mode (``MKL_CBWR_AUTO | MKL_CBWR_STRICT``) on one thread (below): a
product gives the same bits every time, whatever the Session's thread count. (On several
threads MKL splits a long contraction: ``(64, 3072) @ (3072, 768)`` and ``(256, 8192) @ (8192,
256)`` gave other bits on two threads than on one in its default mode, so a Session's ``"auto"``
thread count, which follows the machine's load, would have changed its results.)

Threads: MKL runs sequentially, each product on the thread that asks for it (the threads a
Session runs its steps on). Its Intel OpenMP layer gave wrong products on two threads in a
process that had imported torch (torch's own OpenMP runtime: errors of about 150 on
``(64, 3072) @ (3072, 768)``, a different result each time), so it is not used: a program with
several BLAS threads multiplies its large products on one, and its smaller ones on numpy's
OpenBLAS with the Session's thread count.
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
import sys
from typing import Any

import numpy as np

from xlgraph.ops import blas

__all__ = ["ENV", "MIN_PRODUCT", "check", "choice", "library", "matmul", "takes"]

ENV = "XLGRAPH_BLAS"  # "openblas" or "mkl"; unset: MKL when the extra is installed
MIN_PRODUCT = 1 << 26  # multiply-adds of the smallest product MKL takes
_CHOICES = ("openblas", "mkl")
_THREADING_SEQUENTIAL = 1  # MKL_Set_Threading_Layer's MKL_THREADING_SEQUENTIAL
_CBWR_AUTO_STRICT = 2 | 0x10000  # MKL_CBWR_AUTO | MKL_CBWR_STRICT: bits free of thread count
_ROW_MAJOR, _NO_TRANS = 101, 111
_Int = ctypes.c_int64


def choice() -> str | None:
    """``XLGRAPH_BLAS`` as asked: ``"openblas"``, ``"mkl"`` or None (unset); a ``ValueError``
    naming the variable for any other value."""
    value = os.environ.get(ENV, "")
    if value and value not in _CHOICES:
        raise ValueError(f"environment variable {ENV}={value!r} is not a BLAS xlgraph knows "
                         f"({' or '.join(_CHOICES)}; unset: mkl when installed)")
    return value or None


def _library_path() -> str | None:
    """Where the ``mkl`` wheel put ``libmkl_rt`` (under the environment's ``lib``), or None."""
    try:
        from importlib import metadata

        files = metadata.distribution("mkl").files or []
    except Exception:  # noqa: BLE001 - not installed (or unreadable metadata): no MKL
        return None
    for f in files:
        if f.name.startswith("libmkl_rt.so"):
            return str(f.locate())
    path = os.path.join(sys.prefix, "lib", "libmkl_rt.so.3")
    return path if os.path.exists(path) else None


class _Mkl:
    """libmkl_rt's ``cblas_?gemm_64`` (64-bit integers), sequential."""

    def __init__(self, path: str) -> None:
        lib = ctypes.CDLL(path)
        lib.MKL_Set_Threading_Layer(ctypes.c_int(_THREADING_SEQUENTIAL))  # before any other
        if lib.MKL_CBWR_Set(ctypes.c_int(_CBWR_AUTO_STRICT)) != 0:  # the bits: see the module
            raise ImportError(f"the MKL at {path} has no strict reproducible mode "
                              "(MKL_CBWR_STRICT, MKL 2019.3 on): pip install xlgraph[mkl]")
        self.gemm: dict[np.dtype, Any] = {}
        for dtype, name, scalar in ((np.float32, "cblas_sgemm_64", ctypes.c_float),
                                    (np.float64, "cblas_dgemm_64", ctypes.c_double)):
            fn = getattr(lib, name)
            fn.restype = None
            fn.argtypes = [ctypes.c_int] * 3 + [_Int] * 3 + [
                scalar, ctypes.c_void_p, _Int, ctypes.c_void_p, _Int, scalar, ctypes.c_void_p,
                _Int]
            self.gemm[np.dtype(dtype)] = fn


@functools.cache
def library() -> _Mkl | None:
    """MKL, loaded on first use, or None where products stay numpy's (``XLGRAPH_BLAS=openblas``,
    or the extra is not installed and not asked for)."""
    asked = choice()
    if asked == "openblas":
        return None
    path = _library_path()
    if path is None:
        check()
        return None
    return _Mkl(path)


def check() -> None:
    """Fail at once, without loading MKL, where the first large product would: a bad
    ``XLGRAPH_BLAS`` (``ValueError``), or ``XLGRAPH_BLAS=mkl`` without the extra
    (``ImportError`` naming it)."""
    if choice() == "mkl" and _library_path() is None:
        raise ImportError(f"{ENV}=mkl needs Intel MKL: pip install xlgraph[mkl]")


def _operand(x: np.ndarray) -> tuple[int, int] | None:
    """``(trans, leading dimension)`` of matrix ``x`` for a row-major ``gemm``, or None when
    neither of its strides is one element (BLAS cannot read it as it lies)."""
    size = x.itemsize
    s0, s1 = x.strides
    if s1 == size and s0 % size == 0 and s0 >= x.shape[1] * size:
        return 0, s0 // size
    if s0 == size and s1 % size == 0 and s1 >= x.shape[0] * size:
        return 1, s1 // size
    return None


def takes(m: int, k: int, n: int, dtype: Any) -> bool:
    """Whether a product of ``(m, k)`` and ``(k, n)`` matrices of ``dtype`` runs on MKL (given
    operands it can read): MKL is in use and the product is large enough."""
    return (min(m, k, n) > 1 and m * k * n >= MIN_PRODUCT
            and np.dtype(dtype) in blas.GEMM_DTYPES and library() is not None)


def _layout(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> tuple[int, ...] | None:
    """``(ta, lda, tb, ldb, ldc)`` of the matrices ``out = a @ b`` for a row-major ``gemm``,
    or None when one of them does not suit BLAS as it lies."""
    fa, fb = _operand(a), _operand(b)
    size = out.itemsize
    if (fa is None or fb is None or out.strides[1] != size or out.strides[0] % size
            or out.strides[0] < out.shape[1] * size
            or not (a.flags.aligned and b.flags.aligned and out.flags.aligned)):
        return None
    return (*fa, *fb, out.strides[0] // out.itemsize)


def _gemm(fn: Any, layout: tuple[int, ...], a: np.ndarray, b: np.ndarray,
          out: np.ndarray) -> None:
    """``out = a @ b`` for matrices of the given ``_layout`` by MKL's ``fn``."""
    ta, lda, tb, ldb, ldc = layout
    (m, k), n = a.shape, b.shape[1]
    fn(_ROW_MAJOR, _NO_TRANS + ta, _NO_TRANS + tb, m, n, k, 1.0, a.ctypes.data, lda,
       b.ctypes.data, ldb, 0.0, out.ctypes.data, ldc)


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None) -> np.ndarray | None:
    """``a @ b`` by MKL (into ``out`` when given), or None, with nothing written, where this
    product is numpy's (see the module). Batch dimensions broadcast as numpy's; each matrix of
    the batch is one ``gemm`` call, the call a 2-D product of that matrix makes."""
    if b.ndim < 2 or a.size * b.shape[-1] < MIN_PRODUCT or a.ndim < 2:
        return None  # a small product (m k n <= a.size n): the cheap checks first
    (m, k), n = a.shape[-2:], b.shape[-1]
    if b.shape[-2] != k or a.dtype != b.dtype or not takes(m, k, n, a.dtype):
        return None
    try:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        return None
    shape = (*batch, m, n)
    if out is None:
        out = np.empty(shape, a.dtype)
    elif (out.shape != shape or out.dtype != a.dtype or not out.flags.writeable
          or np.may_share_memory(out, a) or np.may_share_memory(out, b)):
        return None
    a, b = np.broadcast_to(a, (*batch, m, k)), np.broadcast_to(b, (*batch, k, n))
    first = (0,) * len(batch)  # every matrix of a batch has the strides of the first
    layout = _layout(a[first], b[first], out[first]) if math.prod(batch) else ()
    if layout is None:
        return None
    gemm = library().gemm[a.dtype]
    for index in np.ndindex(*batch):
        _gemm(gemm, layout, a[index], b[index], out[index])
    return out
