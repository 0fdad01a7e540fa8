"""The softmax's loop forms along one axis (``xlgraph.ops.loops``' conventions): the general
loop, the vectorised float32 rows loop, the gradient's rows loop, attention's scaled and masked
softmax and its scaled gradient in one loop each (``lower.scaled_softmax``), and a
classifier's float32 softmax and its ``nll_loss_with_softmax_grad`` in one loop
(``lower.softmax_losses``).

``softmax(logits)`` writes the probabilities (GPT-2 small's 512 x 50257 logits: 103 MB) and the
loss reads them again to write the gradient ``p scale`` (minus ``scale`` at each label). Where
the probabilities have no other reader, ``softmax_nll`` takes each row's maximum, writes the
row's exponentials to the gradient's row while summing them, and scales that row by
``scale / sum``: the logits are read once and the gradient written once. Its results are those
of ``softmax_rows32`` and ``loops.nll_softmax`` to the backend's tolerance: the same maximum,
exponentials and sums (``exp_shifted``), the gradient ``e (scale / sum)`` where those loops
round ``e / sum`` first.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from xlgraph import dtypes
from xlgraph.ops.half_round import to_half_precision
from xlgraph.ops.loops import _EXP_LOW, _ONE, check_labels, exp32, float_only
from xlgraph.tensor import TensorSpec

__all__ = ["SUM_RUN", "exp_shifted", "lane_max", "lane_sum16", "nll_scale",
           "row_max", "run_sum16", "scaled_masked_softmax32", "scaled_masked_softmax_loop",
           "scaled_softmax_grad_loop", "scaled_softmax_grad_rows", "softmax", "softmax_grad_row",
           "softmax_grad_rows", "softmax_nll", "softmax_nll_half", "softmax_nll_loop",
           "softmax_rows32"]


def softmax(x, out, axis):  # noqa: ANN001, ANN201
    """``softmax`` along ``axis``; ``out`` may be ``x``."""
    n = x.shape[axis]
    inner = 1
    for k in range(axis + 1, x.ndim):
        inner *= x.shape[k]
    xs, outs = x.reshape(-1), out.reshape(-1)
    for base in range(0, xs.size, n * inner):
        for k in range(base, base + inner):
            top = xs[k]
            for j in range(1, n):
                top = max(top, xs[k + j * inner])
            total = outs[k] = np.exp(xs[k] - top)
            for j in range(1, n):
                e = outs[k + j * inner] = np.exp(xs[k + j * inner] - top)
                total += e
            for j in range(n):
                outs[k + j * inner] /= total


def lane_max(xr, m):  # noqa: ANN001, ANN201 - numba compiles it (an intrinsic)
    """The largest of ``xr[:m]``, ``m`` a positive multiple of 16: sixteen running maxima
    (item ``i`` into lane ``i % 16``, an item replacing its lane's maximum where it is larger),
    the lanes then combined pairwise. The numba backend compiles it to vector compares
    (``backends.numba_lanes``)."""
    lanes = list(xr[:16])
    for j in range(16, m):
        if xr[j] > lanes[j % 16]:
            lanes[j % 16] = xr[j]
    while len(lanes) > 1:
        lanes = [b if b > a else a for a, b in zip(lanes[::2], lanes[1::2])]
    return lanes[0]


def row_max(xr):  # noqa: ANN001, ANN201
    """The largest element of the 1-D ``xr``: ``lane_max`` over the multiples of 16, then the
    rest in turn (one running maximum waits for each compare: 36 against 17 ms over 512 x 50257
    float32 for eight scalar ones, 0.29 against 0.05 ns per element in L1 for them against the
    vector lanes). A row holding NaN may give NaN or the largest other element; its softmax is
    NaN either way."""
    n = xr.size
    tail = n - n % 16
    top = lane_max(xr, tail) if tail else xr[0]
    for j in range(tail, n):
        top = max(top, xr[j])
    return top


SUM_RUN = 1024  # elements summed in 16 partial sums, fresh for each run (4 KB: in L1)


def lane_sum16(a, m, zero):  # noqa: ANN001, ANN201 - numba compiles it (an intrinsic)
    """The sum of ``a[:m]``, ``m`` a multiple of 16, in sixteen running sums from ``zero``
    (item ``i`` into sum ``i % 16``), sum ``k`` then added to sum ``k + 8`` and those eight
    combined as ``((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))``. The numba backend
    compiles it to vector adds (``backends.numba_lanes``)."""
    sums = [zero] * 16
    for j in range(m):
        sums[j % 16] += a[j]
    lanes = [sums[k] + sums[k + 8] for k in range(8)]
    while len(lanes) > 1:
        lanes = [x + y for x, y in zip(lanes[::2], lanes[1::2])]
    return lanes[0]


def run_sum16(a):  # noqa: ANN001, ANN201
    """The sum of the 1-D ``a``: ``lane_sum16`` over the multiples of 16 (two vector registers
    of running sums), then the elements after them in turn."""
    n = a.size
    tail = n - n % 16
    total = lane_sum16(a, tail, a[0] - a[0])
    for j in range(tail, n):
        total += a[j]
    return total


def exp_shifted(xr, o, top):  # noqa: ANN001, ANN201
    """Write ``exp32(xr - top)`` to the float32 row ``o`` (0 where ``xr - top <= -87``; NaN
    stays NaN) and return its sum: run by run of ``SUM_RUN``, each summed (``run_sum16``)
    while in L1, the runs' sums added in turn. ``o`` may be ``xr``: then the loop reads and
    writes one array, which the compiler vectorises (two that overlap it runs one by one).
    The numba backend compiles it with fused multiply-adds (``loops.contracted``'s, for it
    alone, not its callers' own arithmetic): 0.55 against 0.86 ns per element in L1."""
    zero = _ONE - _ONE
    total = zero
    same = o.ctypes.data == xr.ctypes.data
    for start in range(0, o.size, SUM_RUN):
        ob = o[start:start + SUM_RUN]
        if same:
            for j in range(ob.size):
                d = ob[j] - top
                ob[j] = zero if d <= _EXP_LOW else exp32(d)
        else:
            xb = xr[start:start + SUM_RUN]
            for j in range(ob.size):
                d = xb[j] - top
                ob[j] = zero if d <= _EXP_LOW else exp32(d)
        total += run_sum16(ob)
    return total


def softmax_rows32(x, out):  # noqa: ANN001, ANN201
    """``softmax`` of float32 along the last axis with ``exp32``, vectorised: 18 against 67 ms
    for the C library's ``exp`` on 1024 x 8192 (numpy 51); 58 against 79 ms with ``row_max``
    on GPT-2 small's logits (512 x 50257). Exponents below -87 give 0 (numpy: at most 1e-38);
    each row's sum as ``exp_shifted`` (numpy: pairwise); ``out`` may be ``x``."""
    n = x.shape[-1]
    xs, outs = x.reshape(-1), out.reshape(-1)
    for base in range(0, xs.size, n):
        xr, o = xs[base:base + n], outs[base:base + n]
        total = exp_shifted(xr, o, row_max(xr))
        for j in range(n):
            o[j] /= total


def scaled_masked_softmax32(x, c, mask, out):  # noqa: ANN001, ANN201
    """``softmax(x * c + mask)`` of float32 along the last axis, ``c`` one element and
    ``mask``'s rows repeating over ``x``'s (attention's scale and causal mask): each row of
    ``x * c + mask`` (numpy's two roundings) is written to ``out`` and taken there as
    ``softmax_rows32`` takes it, so the results are that loop's on numpy's sum, bit for bit.
    ``out`` is none of the inputs."""
    n = x.shape[-1]
    xs, ms, outs = x.reshape(-1), mask.reshape(-1), out.reshape(-1)
    k = c.reshape(-1)[0]
    for base in range(0, xs.size, n):
        xr, o = xs[base:base + n], outs[base:base + n]
        at = base % ms.size
        mr = ms[at:at + n]
        for j in range(n):
            o[j] = xr[j] * k + mr[j]
        total = exp_shifted(o, o, row_max(o))
        for j in range(n):
            o[j] /= total


def scaled_masked_softmax_loop(ins: list[TensorSpec], axis: int) -> Any:
    """The loop form of ``softmax(x * c + mask)`` on ``ins`` = ``x``, ``c``, ``mask``: float32,
    ``c`` of one element, ``mask`` without its leading ones ending ``x``'s shape with a whole
    row, the softmax along a non-empty last axis."""
    x, c, mask = ins
    first = next((i for i, d in enumerate(mask.shape) if d != 1), len(mask.shape))
    rows = mask.shape[first:]
    if (any(t.dtype is not dtypes.float32 for t in ins) or math.prod(c.shape) != 1
            or axis != len(x.shape) - 1 or not x.shape[-1] or not rows
            or x.shape[len(x.shape) - len(rows):] != rows):
        return None
    return float_only(x, scaled_masked_softmax32)


def softmax_grad_row(d, p, o, k):  # noqa: ANN001, ANN201
    """``p (d - sum(d p)) k`` of one row, the sum in four partial sums (numpy: pairwise); the
    product by ``k`` rounded on its own, as a ``mul`` after the gradient rounds it."""
    n = p.size
    tail = n - n % 4
    s0 = s1 = s2 = s3 = o.dtype.type(0)
    for j in range(0, tail, 4):
        s0 += d[j] * p[j]
        s1 += d[j + 1] * p[j + 1]
        s2 += d[j + 2] * p[j + 2]
        s3 += d[j + 3] * p[j + 3]
    total = (s0 + s1) + (s2 + s3)
    for j in range(tail, n):
        total += d[j] * p[j]
    for j in range(n):
        o[j] = p[j] * (d[j] - total) * k


def softmax_grad_rows(dy, y, out):  # noqa: ANN001, ANN201
    """``y (dy - sum(dy y))`` per row (``softmax_grad_row``, times 1: exact): 0.7 against 1.4
    ms of numpy for the attention's 8 x 4 x 128 x 128 float32."""
    n = y.shape[-1]
    dys, ys, outs = dy.reshape(-1), y.reshape(-1), out.reshape(-1)
    one = outs.dtype.type(1)
    for base in range(0, ys.size, n):
        softmax_grad_row(dys[base:base + n], ys[base:base + n], outs[base:base + n], one)


def scaled_softmax_grad_rows(dy, y, c, out):  # noqa: ANN001, ANN201
    """``softmax_grad(dy, y) * c`` per row, ``c`` one element (attention's scale, backward):
    the bits of ``softmax_grad_rows`` then numpy's ``mul``."""
    n = y.shape[-1]
    dys, ys, outs = dy.reshape(-1), y.reshape(-1), out.reshape(-1)
    k = c.reshape(-1)[0]
    for base in range(0, ys.size, n):
        softmax_grad_row(dys[base:base + n], ys[base:base + n], outs[base:base + n], k)


def scaled_softmax_grad_loop(ins: list[TensorSpec], axis: int) -> Any:
    """The loop form of ``softmax_grad(dy, y) * c`` on ``ins`` = ``dy``, ``y``, ``c``: float
    of one dtype, ``c`` of one element, along a non-empty last axis."""
    dy, y, c = ins
    if (len({t.dtype for t in ins}) != 1 or math.prod(c.shape) != 1
            or axis != len(y.shape) - 1 or not y.shape[-1]):
        return None
    return float_only(y, scaled_softmax_grad_rows)


def softmax_nll(x, labels, loss, grad, scale, count):  # noqa: ANN001, ANN201
    """``nll_loss_with_softmax_grad(softmax(x))`` of float32 ``x`` along its last axis,
    without ``ignore_index``: ``loss = -sum(log p[label]) / count`` (``count`` 1 for the
    sum), ``grad = p scale`` minus ``scale`` at each label. Labels are checked first, with the
    numpy kernel's error; ``grad`` may be ``x``."""
    c = x.shape[-1]
    xs, labs, grads = x.reshape(-1), labels.reshape(-1), grad.reshape(-1)
    check_labels(labs, c)
    total_log = count - count  # 0 of the loop's float type
    for r in range(labs.size):
        xr, o = xs[r * c:(r + 1) * c], grads[r * c:(r + 1) * c]
        total = exp_shifted(xr, o, row_max(xr))
        k = labs[r]
        total_log += np.log(o[k] / total)
        factor = scale / total
        for j in range(c):
            o[j] *= factor
        o[k] -= scale
    loss.reshape(1)[0] = -total_log / count


def softmax_nll_half(x, labels, loss, grad, scale, count):  # noqa: ANN001, ANN201
    """``softmax_nll`` of float16 logits held in float32 (``lower.wide_half``), as the steps
    of wide storage compute it apart: each probability ``p = e / sum`` rounded to float16
    precision (``softmax_rows32``, then a rounding), the loss from those and the gradient
    ``p scale`` (less ``scale`` at the label) in ``nll_softmax``'s order, each rounded too:
    the same bits in one pass over each row instead of five passes over the logits."""
    c = x.shape[-1]
    xs, labs, grads = x.reshape(-1), labels.reshape(-1), grad.reshape(-1)
    check_labels(labs, c)
    total_log = count - count  # 0 of the loop's float type: 0 + log(p) is log(p)
    for r in range(labs.size):
        xr, o = xs[r * c:(r + 1) * c], grads[r * c:(r + 1) * c]
        total = exp_shifted(xr, o, row_max(xr))
        k = labs[r]
        at_label = to_half_precision(o[k] / total)
        total_log += np.log(at_label)
        for j in range(c):
            o[j] = to_half_precision(to_half_precision(o[j] / total) * scale)
        o[k] = to_half_precision(at_label * scale - scale)
    loss.reshape(1)[0] = to_half_precision(-total_log / count)


def nll_scale(labels: TensorSpec, loss_grad: float, ignore_index: int | None,
              reduction: str) -> tuple[float, int] | None:
    """``(scale, count)`` of the loss loops without ``ignore_index``, for the mean (``count``
    the labels) and the sum (``count`` 1): the gradient is ``p scale`` less ``scale`` at each
    label. None for ``ignore_index``, ``reduction="none"`` and no labels."""
    items = math.prod(labels.shape)
    if ignore_index is not None or reduction == "none" or items == 0:
        return None
    count = items if reduction == "mean" else 1
    return loss_grad / count, count


def softmax_nll_loop(ins: list[TensorSpec], axis: int, loss_grad: float,
                     ignore_index: int | None, reduction: str, rounded: bool = False) -> Any:
    """The loop form of a softmax along ``axis`` and its loss on ``ins`` = the logits, the
    labels: float32 logits with a non-empty last axis as ``axis``, ``nll_scale``'s cases;
    ``rounded``: float16 values held in float32, each result rounded (``softmax_nll_half``)."""
    x = ins[0]
    consts = nll_scale(ins[1], loss_grad, ignore_index, reduction)
    if x.dtype is not dtypes.float32 or axis != len(x.shape) - 1 or not x.shape[-1] \
            or consts is None:
        return None
    return float_only(x, softmax_nll_half if rounded else softmax_nll, consts)
