"""Parallel loop forms of 2-D convolutions and 2x2 max pooling for the compiled backend.

The batch is split into ``parts`` (one per core the backend may use) that run at once on the
backend's thread team, each part an item at a time: the item's patches (im2col: channels-first
``(C kh kw, oh ow)``, or channels-last ``(oh ow, kh kw C)`` by the rule of
``window.channels_last``) are copied into a scratch array of the part (it stays in the core's
cache) and multiplied with numpy's own BLAS (``gemm``: ``sgemm``/``dgemm`` at one thread,
called without the GIL); ``conv_transpose`` multiplies first and adds the patches back
(col2im). The weight
gradient sums each part's items into the part's own matrix and then the parts, in part order,
so the bits do not depend on how many threads ran them.

Why not Python threads: on the 2-vCPU machine of the benchmarks a thread that waits (for a job,
a lock or the GIL) halts its virtual CPU, and waking it costs 50-250 us, more than a batch-8
convolution's half (handing half of the MNIST CNN's second conv's matmul, 108 us, to a pool
thread took 184-355 us per call). The compiled backend's threads (OpenMP) spin between parallel
regions: a region costs about 2 us and the matmul halves take 111 us against 215 for the whole
(same bits: each item's product is one BLAS call either way).

The functions follow ``xlgraph.ops.loops``' rules (explicit loops, constants in the arrays'
dtype). ``prange`` is bound to the compiled backend's when it loads this module
(``xlgraph.lower.backends.numba_parallel``) and ``gemm`` (``xlgraph.ops.blas``) compiles to a
call of numpy's BLAS; before that they are plain Python stand-ins and the loops are not meant
to run.
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
from typing import Any

import numpy as np

from xlgraph.ops.blas import GEMM_DTYPES, gemm, gemm_address
from xlgraph.ops.loops import Composite, float_only
from xlgraph.ops.window import Ints, channels_last, chunk_threads, out_shape
from xlgraph.ops.window_loops import is_2x2, max_pool_2x2, max_pool_2x2_grad
from xlgraph.tensor import TensorSpec

prange = range  # the backend's parallel range once bound


@functools.cache
def _threads() -> tuple[int, Any]:
    """The most threads the compiled backend's parallel loops can use, and its setter of the
    calling thread's count (numba is imported by the time a compiled loop runs)."""
    import numba

    return int(numba.config.NUMBA_NUM_THREADS), numba.set_num_threads


def _openmp() -> Any:
    """The process's OpenMP library if it is loaded (numba's OpenMP threads and torch share
    it), else None."""
    try:
        return ctypes.CDLL("libgomp.so.1", mode=os.RTLD_NOLOAD)
    except (OSError, AttributeError):
        return None


_OPENMP: list[Any] = []  # the OpenMP library or None, as found after the first parallel loop


def run_parallel(*arrays: np.ndarray, extra: tuple[Any, ...], loop: Any) -> None:
    """Call the compiled ``loop(*arrays, *extra, parts)`` on the running Session's chunk
    threads (``window.chunk_threads``): ``parts`` splits the batch (axis 0 of the first array)
    for as many threads as the backend may use, whatever runs them, so the bits do not depend
    on the Session's setting. (The count is set here: set inside the loop, numba would not
    cache it.) numba's OpenMP threads set the calling thread's OpenMP thread count when they
    start, which other libraries in the process read (torch's intra-op pool, where it shares
    the OpenMP library: torch at one thread then ran on two): it is put back after."""
    top, set_threads = _threads()
    omp = _OPENMP[0] if _OPENMP else _openmp()
    before = None if omp is None else omp.omp_get_max_threads()
    set_threads(min(chunk_threads(), top))
    loop(*arrays, *extra, max(1, min(arrays[0].shape[0], top)))
    if not _OPENMP:  # the first loop loaded the thread team (and OpenMP, if that is it)
        _OPENMP.append(omp or _openmp())
    if before is not None:
        omp.omp_set_num_threads(before)


def parallel_form(spec: TensorSpec, loop: Any, extra: tuple[Any, ...] = (),
                  blas: bool = False) -> tuple[Composite, tuple] | None:
    """A parallel loop form for non-empty float data: ``loop(*arrays, *extra, parts)``; with
    ``blas``, ``extra`` is followed by ``one`` and ``zero`` in the data's dtype and the address
    of numpy's ``gemm`` for it (None without that BLAS)."""
    dtype = np.dtype(spec.dtype.as_numpy())
    if dtype not in GEMM_DTYPES or not math.prod(spec.shape):
        return None
    if blas:
        address = gemm_address(dtype)
        if address is None:
            return None
        extra = (*extra, dtype.type(1), dtype.type(0), address)
    return Composite(run_parallel, {"extra": extra}, {"loop": loop}, parallel=True), ()


# -- im2col and col2im -------------------------------------------------------------------------
def _span(count, step, offset, size):  # noqa: ANN001, ANN202 - numba infers the types
    """The range of ``j`` in ``[0, count)`` with ``0 <= j step + offset < size``."""
    lo = 0 if offset >= 0 else (step - 1 - offset) // step
    hi = min(count, (size - 1 - offset) // step + 1) if offset < size else 0
    return lo, max(lo, hi)


def _im2col(x, item, cols, back, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw):  # noqa: ANN001, ANN202
    """``cols`` ((C kh kw), oh ow) = the windows of ``x[item]`` (C, H, W): row ``(c, a, b)``
    holds tap ``(a, b)`` of channel ``c`` at every output position, 0 in the padding. With
    ``back`` the other way (col2im): ``x[item]`` = the sum of ``cols``' rows at their windows,
    the taps of each element added in row-major order (as ``conv._col2im``)."""
    h, w = x.shape[2], x.shape[3]
    flat = x[item].reshape(-1) if back else cols.reshape(-1)
    for e in range(flat.size):
        flat[e] = 0
    for c in range(x.shape[1]):
        for a in range(kh):
            i0, i1 = _span(oh, sh, a * dh - ph, h)
            for b in range(kw):
                off = b * dw - pw
                j0, j1 = _span(ow, sw, off, w)
                row = cols[(c * kh + a) * kw + b]
                for i in range(i0, i1):
                    img, base = x[item, c, i * sh + a * dh - ph], i * ow
                    if sw == 1:  # contiguous runs (the common case, vectorised)
                        for j in range(j0, j1):
                            if back:
                                img[j + off] += row[base + j]
                            else:
                                row[base + j] = img[j + off]
                    else:
                        for j in range(j0, j1):
                            if back:
                                img[j * sw + off] += row[base + j]
                            else:
                                row[base + j] = img[j * sw + off]


def _rows(x, item, xt, rows, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw):  # noqa: ANN001, ANN202
    """``rows`` (oh ow, (kh kw C)) = the windows of ``x[item]`` made channels-last (through
    ``xt``, (H, W, C)): row ``(i, j)`` holds the taps of output position ``(i, j)``, channels
    innermost, 0 in the padding."""
    chans, h, w = x.shape[1], x.shape[2], x.shape[3]
    for y in range(h):
        for q in range(w):
            for c in range(chans):
                xt[y, q, c] = x[item, c, y, q]
    for i in range(oh):
        for j in range(ow):
            row = rows[i * ow + j]
            for a in range(kh):
                y = i * sh + a * dh - ph
                for b in range(kw):
                    q, base = j * sw + b * dw - pw, (a * kw + b) * chans
                    if 0 <= y < h and 0 <= q < w:
                        src = xt[y, q]
                        for c in range(chans):
                            row[base + c] = src[c]
                    else:
                        for c in range(chans):
                            row[base + c] = 0


def _rows_add(rows, xt, out, item, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw):  # noqa: ANN001, ANN202
    """``out[item]`` (C, H, W) = the sum of ``rows`` (as ``_rows`` lays them out) at their
    windows, added tap by tap into the channels-last ``xt`` (H, W, C) and then transposed."""
    chans, h, w = out.shape[1], out.shape[2], out.shape[3]
    flat = xt.reshape(-1)
    for e in range(flat.size):
        flat[e] = 0
    for a in range(kh):
        i0, i1 = _span(oh, sh, a * dh - ph, h)
        for b in range(kw):
            j0, j1 = _span(ow, sw, b * dw - pw, w)
            base = (a * kw + b) * chans
            for i in range(i0, i1):
                for j in range(j0, j1):
                    dst, src = xt[i * sh + a * dh - ph, j * sw + b * dw - pw], rows[i * ow + j]
                    for c in range(chans):
                        dst[c] += src[base + c]
    for c in range(chans):
        for y in range(h):
            for q in range(w):
                out[item, c, y, q] = xt[y, q, c]


def _weight(w, last):  # noqa: ANN001, ANN202
    """``w`` (M, C, kh, kw) as the matrix (M, K) that multiplies the patches: ``(c, a, b)``
    columns, or with ``last`` ``(a, b, c)`` ones (a copy)."""
    m, chans, kh, kw = w.shape
    if not last:
        return w.reshape(m, chans * kh * kw).copy()
    wm = np.empty((m, kh * kw * chans), w.dtype)
    for o in range(m):
        for c in range(chans):
            for a in range(kh):
                for b in range(kw):
                    wm[o, (a * kw + b) * chans + c] = w[o, c, a, b]
    return wm


def _sizes(w, y):  # noqa: ANN001, ANN202
    """``(M, kh, kw, C kh kw, oh, ow)`` of a weight ``w`` (M, C, kh, kw) and data ``y`` (N, M,
    oh, ow) at the output positions."""
    m, chans, kh, kw = w.shape
    return m, kh, kw, chans * kh * kw, y.shape[2], y.shape[3]


def _scratch(x, k, p, last):  # noqa: ANN001, ANN202
    """A part's patch matrix ((K, p), or (p, K) with ``last``) and channels-last image."""
    if last:
        return np.empty((p, k), x.dtype), np.empty((x.shape[2], x.shape[3], x.shape[1]), x.dtype)
    return np.empty((k, p), x.dtype), np.empty((1, 1, 1), x.dtype)


def _patches(x, item, xt, cols, last, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw):  # noqa: ANN001, ANN202
    if last:
        _rows(x, item, xt, cols, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw)
    else:
        _im2col(x, item, cols, False, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw)


# called by the loops below: the backend compiles them with the loops
HELPERS = (_span, _im2col, _rows, _rows_add, _weight, _sizes, _scratch, _patches, max_pool_2x2,
           max_pool_2x2_grad)


# -- the loops ---------------------------------------------------------------------------------
# Each takes the geometry, ``last`` (patches channels-last: see ``window.channels_last``), one and
# zero in the data's dtype, the BLAS routine's address and the number of parts.
def conv2d(x, w, out, sh, sw, ph, pw, dh, dw, last, one, zero, blas, parts):  # noqa: ANN001, ANN201
    """``out`` (N, M, oh, ow) = the convolution of ``x`` (N, C, H, W) with ``w`` (M, C, kh,
    kw), one group: per item, the patches and ``w (M, K) @ patches (K, oh ow)``."""
    n, (m, kh, kw, k, oh, ow) = x.shape[0], _sizes(w, out)
    wm = _weight(w, last)
    for t in prange(parts):
        cols, xt = _scratch(x, k, oh * ow, last)
        for item in range(t * n // parts, (t + 1) * n // parts):
            _patches(x, item, xt, cols, last, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw)
            gemm(blas, 0, 1 if last else 0, m, oh * ow, k, one, wm, k, cols,
                 k if last else oh * ow, zero, out[item], oh * ow)


def conv2d_transpose(dy, w, out, sh, sw, ph, pw, dh, dw, last, one, zero, blas, parts):  # noqa: ANN001, ANN201
    """``out`` (N, C, H, W) = the transposed convolution of ``dy`` (N, M, oh, ow) with ``w``
    (M, C, kh, kw), one group: per item, the patches' gradient ``w.T @ dy`` and col2im."""
    n, (m, kh, kw, k, oh, ow) = dy.shape[0], _sizes(w, dy)
    wm = _weight(w, last)
    for t in prange(parts):
        cols, xt = _scratch(out, k, oh * ow, last)
        for item in range(t * n // parts, (t + 1) * n // parts):
            if last:  # (oh ow, K) = dy.T @ w
                gemm(blas, 1, 0, oh * ow, k, m, one, dy[item], oh * ow, wm, k, zero, cols, k)
                _rows_add(cols, xt, out, item, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw)
            else:  # (K, oh ow) = w.T @ dy
                gemm(blas, 1, 0, k, oh * ow, m, one, wm, k, dy[item], oh * ow, zero, cols,
                     oh * ow)
                _im2col(out, item, cols, True, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw)


def conv2d_grad_weight(dy, x, out, sh, sw, ph, pw, dh, dw, last, one, zero, blas, parts):  # noqa: ANN001, ANN201
    """``out`` (M, C, kh, kw) = the gradient of the weight of ``conv2d`` given ``dy`` (N, M,
    oh, ow): per part, the sum over its items of ``dy (M, oh ow) @ patches.T``; then the
    parts' sums added in part order."""
    n, chans, (m, kh, kw, k, oh, ow) = x.shape[0], x.shape[1], _sizes(out, dy)
    sums = np.empty((parts, m, k), x.dtype)
    for t in prange(parts):
        cols, xt = _scratch(x, k, oh * ow, last)
        beta = zero
        for item in range(t * n // parts, (t + 1) * n // parts):
            _patches(x, item, xt, cols, last, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw)
            gemm(blas, 0, 0 if last else 1, m, k, oh * ow, one, dy[item], oh * ow, cols,
                 k if last else oh * ow, beta, sums[t], k)
            beta = one
    for o in range(m):
        for c in range(chans):
            for a in range(kh):
                for b in range(kw):
                    e = (a * kw + b) * chans + c if last else (c * kh + a) * kw + b
                    total = sums[0, o, e]
                    for t in range(1, parts):
                        total += sums[t, o, e]
                    out[o, c, a, b] = total


def max_pool_parts(x, y, parts):  # noqa: ANN001, ANN201
    """``window_loops.max_pool_2x2`` with the batch split into ``parts``."""
    n = x.shape[0]
    for t in prange(parts):
        lo, hi = t * n // parts, (t + 1) * n // parts
        max_pool_2x2(x[lo:hi], y[lo:hi])


def max_pool_grad_parts(dy, x, y, dx, parts):  # noqa: ANN001, ANN201
    """``window_loops.max_pool_2x2_grad`` with the batch split into ``parts``."""
    n = x.shape[0]
    for t in prange(parts):
        lo, hi = t * n // parts, (t + 1) * n // parts
        max_pool_2x2_grad(dy[lo:hi], x[lo:hi], y[lo:hi], dx[lo:hi])


# -- loop forms (``OpDef.loop``) ---------------------------------------------------------------
def max_pool_loop(ins: list[TensorSpec], kernel: Ints, stride: Ints, pads: Ints,
                  dilation: Ints, ceil_mode: bool) -> Any:
    """``max_pool``'s loop form for float data and the geometry of ``window_loops.is_2x2``:
    the batch split over the backend's threads where it has them, else one loop."""
    if not is_2x2(ins[0], kernel, stride, pads, dilation, ceil_mode):
        return None
    return parallel_form(ins[0], max_pool_parts) or float_only(ins[0], max_pool_2x2)


def max_pool_grad_loop(ins: list[TensorSpec], kernel: Ints, stride: Ints, pads: Ints,
                       dilation: Ints, ceil_mode: bool) -> Any:
    """``max_pool_grad``'s loop form, as ``max_pool_loop``."""
    if not is_2x2(ins[1], kernel, stride, pads, dilation, ceil_mode):
        return None
    return parallel_form(ins[0], max_pool_grad_parts) or float_only(ins[0], max_pool_2x2_grad)


def _conv_geometry(x: TensorSpec, out: Ints, kernel: Ints, stride: Ints, pads: Ints,
                   dilation: Ints, groups: int) -> tuple[Any, ...] | None:
    """The loops' geometry arguments and ``last`` for a 2-D convolution of one group of data
    ``x`` and output size ``out``, else None."""
    if len(x.shape) != 4 or groups != 1:
        return None
    last = channels_last(x.shape[1], groups, out, kernel, stride, dilation)
    return (*stride, pads[0], pads[1], *dilation, last)


def conv_loop(ins: list[TensorSpec], stride: Ints, pads: Ints, dilation: Ints,
              groups: int) -> Any:
    """``conv``'s loop form: ``conv2d`` for float data, 2-D, one group."""
    kernel = ins[1].shape[2:]
    out = out_shape(ins[0].shape[2:], kernel, stride, pads, dilation)
    geo = _conv_geometry(ins[0], out, kernel, stride, pads, dilation, groups)
    return None if geo is None else parallel_form(ins[0], conv2d, geo, blas=True)


def conv_transpose_loop(ins: list[TensorSpec], stride: Ints, pads: Ints, dilation: Ints,
                        groups: int, size: Ints) -> Any:
    """``conv_transpose``'s loop form: ``conv2d_transpose`` (2-D, one group)."""
    x = TensorSpec((ins[0].shape[0], ins[1].shape[1] * groups, *size), ins[0].dtype)
    geo = _conv_geometry(x, ins[0].shape[2:], ins[1].shape[2:], stride, pads, dilation, groups)
    return None if geo is None else parallel_form(ins[0], conv2d_transpose, geo, blas=True)


def conv_grad_weight_loop(ins: list[TensorSpec], stride: Ints, pads: Ints, dilation: Ints,
                          groups: int, kernel: Ints) -> Any:
    """``conv_grad_weight``'s loop form: ``conv2d_grad_weight`` (2-D, one group)."""
    geo = _conv_geometry(ins[1], ins[0].shape[2:], kernel, stride, pads, dilation, groups)
    return None if geo is None else parallel_form(ins[0], conv2d_grad_weight, geo, blas=True)
