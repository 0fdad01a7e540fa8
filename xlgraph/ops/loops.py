"""Loop forms of some kernels, for the compiled backend (``xlgraph.lower.backends``).

Each function here is a ``kernel_out`` written as explicit loops over C-contiguous arrays, in
the subset of Python that numba compiles: ``fn(*inputs, *outputs, *extra)``, no allocation (but
the ``pairwise.STACK`` items a loop summing as numpy does holds once per call), and every
scalar constant passed in ``extra`` already cast to the arrays' dtype (so float32 math
stays float32, as in numpy). The numpy kernels remain the reference; an ``OpDef`` points at its
loop form through ``OpDef.loop``, which also decides which attributes the loop covers.

The loops do the numpy kernels' float operations in the same order, element by element, except
where noted: ``exp``/``log`` come from the compiler's math library (numpy has its own SIMD
versions; they may differ in the last bit) and sums over a row accumulate left to right or in
a few partial sums (numpy sums contiguous runs pairwise; LayerNorm and its gradient sum as numpy
does, ``xlgraph.ops.pairwise``), and the ``contracted`` loops round a product and the sum after
it once (a fused multiply-add). Hence the backend's documented tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from xlgraph.ops import loss_loops
from xlgraph.ops.pairwise import STACK, row_sum, sum_plan
from xlgraph.tensor import TensorSpec

# The compiled loops call the C library's ``exp`` once per element, while numpy's ``exp`` is
# SIMD code several times faster per element: past these many elements numpy's separate passes
# win again. Measured on float32 arrays of 32 columns: ``gelu`` at 256 elements takes 1.2 us in
# the loop against numpy's 2.8, at 2048 about the same, at 8192 26 against 13; ``gelu_grad``,
# with more arithmetic per exp, 11.2 against 12.2 us at 4096, even at 5120-6144 and 22.3
# against 18.7 at 8192 (the MLP's batch-256 gradient).
EXP_LOOP_MAX = 2048
EXP_GRAD_LOOP_MAX = 4096


def bits(fn: Callable[..., None]) -> Callable[..., None]:
    """Mark loop ``fn`` as reading and writing its arrays through ``half_round.load``/
    ``store`` and making its constants with ``real``: compiled, it takes float16 arrays as their
    uint16 bits and computes in float32 registers (``xlgraph.ops.half``), one pass."""
    fn.bits = True  # type: ignore[attr-defined]
    return fn


def contracted(fn: Callable[..., None]) -> Callable[..., None]:
    """Mark loop ``fn`` as compiled with its multiplies and adds contracted into fused
    multiply-adds (one rounding instead of two; within the backend's tolerance, not numpy's
    bits): the float32 GELU loops, bound by their arithmetic (``exp32``'s polynomial)."""
    fn.contract = True  # type: ignore[attr-defined]
    return fn


def float_only(spec: TensorSpec, fn: Callable[..., None], consts: tuple[Any, ...] = (),
               ints: tuple[int, ...] = (), max_elements: int | None = None,
               ) -> tuple[Callable[..., None], tuple[Any, ...]] | None:
    """``(fn, extra)`` for float32 and float64 tensors of ``spec``: ``extra`` is ``consts`` as
    numpy scalars of that dtype, then ``ints``. None for other dtypes (the compiled backend does
    no float16 arithmetic) and for tensors of more than ``max_elements``."""
    dtype = np.dtype(spec.dtype.as_numpy())
    if dtype not in (np.float32, np.float64):
        return None
    if max_elements is not None and math.prod(spec.shape) > max_elements:
        return None
    return fn, (*(np.asarray(c, dtype)[()] for c in consts), *ints)


@dataclass(frozen=True)
class Composite:
    """A loop form that stays Python and calls compiled loops for its inner work (a kernel
    whose matmuls stay with BLAS): the backend calls ``fn(*inputs, *outputs, **kwargs,
    **compiled)``, ``compiled`` mapping each name of ``loops`` to that loop compiled;
    ``parallel`` loops use ``prange`` (``xlgraph.ops.window_parallel``)."""

    fn: Callable[..., Any]
    kwargs: dict[str, Any]
    loops: dict[str, Callable[..., Any]]
    parallel: bool = False


def gelu(x, out, a, b, one, top):  # noqa: ANN001, ANN201 - numba infers the types
    """``x / (1 + exp(min(x (a x^2 + b), top)))`` element by element; ``out`` may be ``x``."""
    xs, outs = x.reshape(-1), out.reshape(-1)
    for i in range(xs.size):
        v = xs[i]
        t = min((v * v * a + b) * v, top)
        outs[i] = v / (np.exp(t) + one)


def gelu_grad(dy, x, out, a, b, one, c, d, top):  # noqa: ANN001, ANN201
    """``s (1 + x (c x^2 + d) (1 - s)) dy`` with ``s = 1 / (1 + exp(min(x (a x^2 + b), top)))``."""
    dys, xs, outs = dy.reshape(-1), x.reshape(-1), out.reshape(-1)
    for i in range(xs.size):
        v = xs[i]
        p = v * v
        s = one / (np.exp(min((p * a + b) * v, top)) + one)
        outs[i] = ((one - s) * ((p * c + d) * v) + one) * s * dys[i]


# float32 ``exp`` in plain arithmetic, which the compiler vectorises (the C library's ``exp`` is
# one call per element): Cody-Waite reduction by ln 2 and Cephes' degree-7 polynomial, within
# 0.53 ulp of the true value over [-87, 80] (numpy's SIMD ``exp``: 2.4), measured on 2e6 points.
_LOG2E = np.float32(1.44269504088896341)
_LN2_HI = np.float32(0.693359375)
_LN2_LO = np.float32(-2.12194440e-4)
_EXP_P = tuple(np.float32(c) for c in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                                       4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1))
_EXP_LOW = np.float32(-87.0)  # exp of anything lower is taken as exp(-87) (1.6e-38, normal)
_HALF = np.float32(0.5)
_ONE = np.float32(1.0)


def scale_pow2(p, n):  # noqa: ANN001, ANN201
    """``p * 2**n`` for an integral ``n`` with ``2**n`` a normal number of ``p``'s type. The
    numba backend compiles it to an integer add, a shift and a bit cast."""
    return np.ldexp(p, np.int32(n))


def exp32(t):  # noqa: ANN001, ANN201
    """``exp(t)`` of a float32 ``t <= 80`` (see above); NaN stays NaN."""
    c = t if t > _EXP_LOW else _EXP_LOW
    n = np.floor(c * _LOG2E + _HALF)
    r = c - n * _LN2_HI - n * _LN2_LO
    p0, p1, p2, p3, p4, p5 = _EXP_P
    e = scale_pow2((((((p0 * r + p1) * r + p2) * r + p3) * r + p4) * r + p5) * r * r + r + _ONE, n)
    return e if t == t else t


@contracted
def gelu32(x, out, a, b, one, top):  # noqa: ANN001, ANN201
    """``gelu`` for float32 with ``exp32``: vectorised (0.74 vs 1.04 us at 256 elements, 3.2
    vs 6.3 at 2560, 9.1 vs 19.5 at 8192; numpy 2.5, 4.7, 10.3); with fused multiply-adds
    1.44 against 1.96 ms of CPU at 512 x 3072 (GPT-2 small's)."""
    xs, outs = x.reshape(-1), out.reshape(-1)
    for i in range(xs.size):
        outs[i] = gelu_value32(xs[i], a, b, one, top)


def gelu_value32(v, a, b, one, top):  # noqa: ANN001, ANN201
    """``gelu32``'s value at one element ``v`` (the loops that share it, such as
    ``pair_loops.bias_gelu32``, give its bits)."""
    return v / (exp32(min((v * v * a + b) * v, top)) + one)


@contracted
def gelu_grad32(dy, x, out, a, b, one, c, d, top):  # noqa: ANN001, ANN201
    """``gelu_grad`` for float32 with ``exp32``: vectorised; with fused multiply-adds 1.81
    against 2.43 ms of CPU at 512 x 3072."""
    dys, xs, outs = dy.reshape(-1), x.reshape(-1), out.reshape(-1)
    for i in range(xs.size):
        outs[i] = gelu_grad_value32(dys[i], xs[i], a, b, one, c, d, top)


def gelu_grad_value32(g, v, a, b, one, c, d, top):  # noqa: ANN001, ANN201
    """``gelu_grad32``'s value at one element: gradient ``g``, input ``v``."""
    p = v * v
    s = one / (exp32(min((p * a + b) * v, top)) + one)
    return ((one - s) * ((p * c + d) * v) + one) * s * g


def add_loop(ins: list[TensorSpec]) -> tuple[Callable[..., None], tuple[Any, ...]] | None:
    """The loop form of ``add`` where the second operand repeats along the first's leading
    axes (a bias over rows) or has its shape, both float of one dtype: ``(add_rows, ())``."""
    x, y = ins
    first = next((i for i, d in enumerate(y.shape) if d != 1), len(y.shape))
    rows = y.shape[first:]  # y without its leading ones: must end x's shape
    if (x.dtype != y.dtype or not math.prod(y.shape) or len(rows) > len(x.shape)
            or x.shape[len(x.shape) - len(rows):] != rows):
        return None
    return float_only(x, add_rows)


def add_rows(x, y, out):  # noqa: ANN001, ANN201
    """``x + y`` with ``y`` repeated over ``x``'s leading axes (one rounding per element, as
    numpy: the same bits); ``out`` may be ``x``, or ``y`` where they have one size. Each case
    is its own loop on row slices, which the compiler vectorises (a loop whose output is one
    of its inputs fails the vectorised code's overlap check and runs element by element).
    CPU time against numpy's add (float32, 512 x 768): a bias in place 47 against 95 us
    (512 x 3072: 322 against 368), out of place 112 against 203; same shapes 105-111 against
    107-119 in place."""
    xs, ys, outs = x.reshape(-1), y.reshape(-1), out.reshape(-1)
    inner = ys.size
    if outs.ctypes.data == xs.ctypes.data:
        for base in range(0, xs.size, inner):
            row = outs[base:base + inner]
            for j in range(inner):
                row[j] += ys[j]
    elif outs.ctypes.data == ys.ctypes.data and inner == xs.size:  # a single row
        for j in range(inner):
            outs[j] = xs[j] + outs[j]
    else:
        for base in range(0, xs.size, inner):
            xr, row = xs[base:base + inner], outs[base:base + inner]
            for j in range(inner):
                row[j] = xr[j] + ys[j]


def scaled_add(x, y, out, a, b):  # noqa: ANN001, ANN201
    """``a x + b y`` into ``out``: ``x`` itself, or a spare array of its shape (which ``y``
    cannot be). In place, ``x`` is scaled before ``y`` is read, as in the numpy kernel (this
    matters when ``y`` is ``x``); ``x * 1`` is exact. Each case is one loop that the compiler
    can vectorise; in place with ``y`` another array it is the out-of-place loop on ``x``
    alone (one store per element: 2.8 against 3.6 us at 784x32 float32, the same bits)."""
    xs, ys = x.reshape(-1), y.reshape(-1)
    if out.ctypes.data == x.ctypes.data and y.ctypes.data == x.ctypes.data:
        for i in range(xs.size):
            t = xs[i] = xs[i] * a
            xs[i] = t + ys[i] * b
    elif out.ctypes.data == x.ctypes.data:
        for i in range(xs.size):
            xs[i] = xs[i] * a + ys[i] * b
    else:
        outs = out.reshape(-1)
        for i in range(xs.size):
            outs[i] = xs[i] * a + ys[i] * b


def scale(x, out, s):  # noqa: ANN001, ANN201
    """``x * s`` into ``out`` (one rounding per element, as numpy's multiply by a scalar of
    ``x``'s dtype): a summed weight gradient's power-of-two mean (``lower.replica_folds``)."""
    xs, outs = x.reshape(-1), out.reshape(-1)
    for i in range(xs.size):
        outs[i] = xs[i] * s


def sum_leading(x, out, outer):  # noqa: ANN001, ANN201
    """Sum over the leading axes (``outer`` elements of them): row by row, as numpy reduces a
    C-ordered array over its first axes, so the bits are the same. Each row is a slice, which
    the compiler vectorises (indexing ``xs[r * inner + j]`` it did not: 1.89 against 0.29 ms
    of CPU for 512 x 3072 float32, numpy 0.24)."""
    xs, outs = x.reshape(-1), out.reshape(-1)
    inner = outs.size
    for j in range(inner):
        outs[j] = xs[j]
    for r in range(1, outer):
        row = xs[r * inner:(r + 1) * inner]
        for j in range(inner):
            outs[j] += row[j]


def replica_sum(flat, out, start, stride, local, replicas, zero, count, mean):  # noqa: ANN001, ANN201
    """``out`` = the sum of ``replicas`` parts of ``flat``, each ``out.size`` elements: part
    ``k`` starts at ``start + (k // local) * stride + (k % local) * out.size`` (an all-reduce's
    parts in a bucket's buffer, ``xlgraph.lower.buckets``), then divided by ``count`` if
    ``mean``. As ``ops.collectives`` reduces the gathered parts (``np.add.reduce`` over the
    replicas, each added in turn to a zero; then ``np.divide``), the same bits (but which NaN
    a sum of two different NaNs gives), in one pass: blocks of ``out`` stay in cache while
    every part is added."""
    n = out.size
    for b in range(0, n, 2048):
        e = min(b + 2048, n)
        o = out[b:e]
        part = flat[start + b:start + e]
        for j in range(e - b):
            o[j] = part[j] + zero
        for k in range(1, replicas):
            at = start + (k // local) * stride + (k % local) * n
            part = flat[at + b:at + e]
            for j in range(e - b):
                o[j] += part[j]
        if mean:
            for j in range(e - b):
                o[j] /= count


def row_stats(xr, tmp, plan, pending, eps, one, width):  # noqa: ANN001, ANN201
    """The mean of row ``xr`` and ``1 / sqrt(var + eps)`` (biased variance of the centred
    row), in the row's dtype (``one`` and ``width`` of that dtype): numpy's operations, its
    sums pairwise (``pairwise.row_sum``, ``plan`` the row length's ``sum_plan``, ``pending``
    its stack); ``tmp`` (a row of ``xr``'s size, not ``xr``) holds the squares."""
    n = xr.size
    mean = row_sum(xr, 0, plan, pending) / width
    for j in range(n):
        c = xr[j] - mean
        tmp[j] = c * c
    return mean, one / np.sqrt(row_sum(tmp, 0, plan, pending) / width + eps)


def layer_norm(x, w, b, out, eps, one, width):  # noqa: ANN001, ANN201
    """``layer_norm`` over the last axis, row by row: ``(x - mean) / sqrt(var + eps) * w + b``
    (``row_stats``), the numpy kernel's bits."""
    n = w.size
    xs, outs = x.reshape(-1), out.reshape(-1)
    plan, pending = sum_plan(n), np.empty(STACK, outs.dtype)
    for base in range(0, xs.size, n):
        xr, o = xs[base:base + n], outs[base:base + n]
        mean, invstd = row_stats(xr, o, plan, pending, eps, one, width)
        for j in range(n):
            o[j] = (xr[j] - mean) * invstd * w[j] + b[j]


def layer_norm_grad(dy, x, w, dx, dw, db, eps, one, width):  # noqa: ANN001, ANN201
    """``layer_norm_grad`` row by row: with ``h = (x - mean) / std`` and ``g = dy w``,
    ``dx = (g - mean(g) - h mean(g h)) / std``, the means pairwise (``g`` and ``g h`` held in
    ``dx``'s row); ``dw`` and ``db`` sum ``dy h`` and ``dy`` over the rows, first row first
    (as numpy reduces a C-ordered array over its leading axes): the numpy kernel's bits. Each
    loop writes one array, so the compiler vectorises it (its overlap checks stay few)."""
    n = w.size
    dys, xs, dxs = dy.reshape(-1), x.reshape(-1), dx.reshape(-1)
    plan, pending = sum_plan(n), np.empty(STACK, dxs.dtype)
    for j in range(n):
        dw[j] = db[j] = 0
    for base in range(0, xs.size, n):
        xr, dr, o = xs[base:base + n], dys[base:base + n], dxs[base:base + n]
        mean, invstd = row_stats(xr, o, plan, pending, eps, one, width)
        for j in range(n):
            dw[j] += dr[j] * ((xr[j] - mean) * invstd)
        for j in range(n):
            db[j] += dr[j]
        for j in range(n):
            o[j] = dr[j] * w[j]
        mg = row_sum(o, 0, plan, pending) / width
        for j in range(n):
            o[j] = dr[j] * w[j] * ((xr[j] - mean) * invstd)
        mgh = row_sum(o, 0, plan, pending) / width
        for j in range(n):
            h = (xr[j] - mean) * invstd
            o[j] = (dr[j] * w[j] - mg - h * mgh) * invstd


def gather_grad_rows(dy, indices, out, zero_oor):  # noqa: ANN001, ANN201
    """``gather_grad`` along axis 0: zeros, then each row of ``dy`` added to the row of ``out``
    its index names (negative ones count from the end unless ``zero_oor`` is 1, which skips
    them; out-of-range ones are skipped), in
    index order as ``np.add.at`` adds: the same bits (the embedding's gradient: 1 against 7 ms
    for 1024 rows of 256 float32)."""
    n = out.shape[0]
    outs, dys, idx = out.reshape(-1), dy.reshape(-1), indices.reshape(-1)
    width = outs.size // n if n else 0
    for i in range(outs.size):
        outs[i] = 0
    for r in range(idx.size):
        k = idx[r] + n if idx[r] < 0 and zero_oor == 0 else idx[r]
        if 0 <= k < n:
            row, src = outs[k * width:(k + 1) * width], dys[r * width:(r + 1) * width]
            for j in range(width):
                row[j] += src[j]


def check_labels(labs, c):  # noqa: ANN001, ANN201
    """Raise for the first label outside ``[0, c)`` as the numpy kernel does, in its words
    (none counts from the end)."""
    for r in range(labs.size):
        if not 0 <= labs[r] < c:
            raise IndexError("label " + str(labs[r]) + " is out of range for " + str(c)
                             + " classes (labels must be in [0, " + str(c)
                             + ") or equal ignore_index=None)")


def nll_softmax(probs, labels, loss, grad, scale, count):  # noqa: ANN001, ANN201
    """``nll_loss_with_softmax_grad`` without ``ignore_index``: ``loss = -sum(log p[label])``
    (divided by ``count`` for the mean, else ``count`` is 1), ``grad = p scale`` minus ``scale``
    at each label. The loss is summed before ``grad`` is written (it may share ``probs``)."""
    c = probs.shape[-1]
    ps, labs, grads = probs.reshape(-1), labels.reshape(-1), grad.reshape(-1)
    check_labels(labs, c)
    total = ps[0] * 0  # replaced by the first term below (there is at least one label)
    for r in range(labs.size):
        k = r * c + labs[r]
        total = np.log(ps[k]) if r == 0 else total + np.log(ps[k])
    loss.reshape(1)[0] = -total / count
    for i in range(ps.size):
        grads[i] = ps[i] * scale
    for r in range(labs.size):
        grads[r * c + labs[r]] -= scale


# The loop forms that can raise (a fused segment holds at most one, so its error names the op).
RAISING = frozenset({nll_softmax, loss_loops.nll_loss_rows, loss_loops.nll_loss_grad_rows})
