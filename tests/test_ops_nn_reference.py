"""Convolution, pooling and normalisation against plainly written loop references.

The references loop over every output element and kernel tap of small inputs, straight from
the ONNX definitions, sharing no code with the vectorised kernels.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from op_harness import gradients, run_forward

import xlgraph
from xlgraph import ops
from xlgraph.errors import ShapeError
from xlgraph.op import REGISTRY, Sample


# -- references --------------------------------------------------------------------------------
def ref_pads(pad_type, size, kernel, stride, dilation, padding):
    n = len(size)
    if pad_type == "valid":
        return [0] * n, [0] * n
    if pad_type == "not_set":
        padding = list(padding) if padding is not None else [0] * (2 * n)
        return padding[:n], padding[n:]
    begins, ends = [], []
    for L, k, s, d in zip(size, kernel, stride, dilation):
        total = max(0, (math.ceil(L / s) - 1) * s + (k - 1) * d + 1 - L)
        lo, hi = total // 2, total - total // 2
        begins.append(lo if pad_type == "same_upper" else hi)
        ends.append(hi if pad_type == "same_upper" else lo)
    return begins, ends


def ref_conv(x, w, stride, begins, ends, dilation, groups, dy=None):
    """y[b, m, o] = sum_{c, t} x[b, g*C/G + c, o*s - pad + t*d] * w[m, c, t]; with ``dy``
    also the gradients of sum(dy * y) with respect to x and w. Returns (y, dx, dw)."""
    N, C, *size = x.shape
    M, cg, *kernel = w.shape
    out = [(L + b + e - d * (k - 1) - 1) // s + 1
           for L, b, e, k, s, d in zip(size, begins, ends, kernel, stride, dilation)]
    y, dx, dw = np.zeros((N, M, *out)), np.zeros_like(x), np.zeros_like(w)
    for b, m, o in itertools.product(range(N), range(M), itertools.product(*map(range, out))):
        g = m // (M // groups)
        for c, t in itertools.product(range(cg), itertools.product(*map(range, kernel))):
            pos = [oi * s - p + ti * d for oi, s, p, ti, d in zip(o, stride, begins, t, dilation)]
            if all(0 <= p < L for p, L in zip(pos, size)):
                xi, wi, yi = (b, g * cg + c, *pos), (m, c, *t), (b, m, *o)
                y[yi] += x[xi] * w[wi]
                if dy is not None:
                    dx[xi] += dy[yi] * w[wi]
                    dw[wi] += dy[yi] * x[xi]
    return y, dx, dw


def ref_conv_transpose(x, w, stride, begins, ends, dilation, groups, output_padding):
    """Scatter every input element through the kernel, then cut the padding off."""
    N, C, *size = x.shape
    _, mg, *kernel = w.shape
    full = [s * (L - 1) + op + d * (k - 1) + 1
            for L, op, k, s, d in zip(size, output_padding, kernel, stride, dilation)]
    y = np.zeros((N, mg * groups, *full))
    for b, c, i in itertools.product(range(N), range(C), itertools.product(*map(range, size))):
        g = c // (C // groups)
        for m, t in itertools.product(range(mg), itertools.product(*map(range, kernel))):
            pos = [ii * s + ti * d for ii, s, ti, d in zip(i, stride, t, dilation)]
            y[(b, g * mg + m, *pos)] += x[(b, c, *i)] * w[(c, m, *t)]
    return y[(..., *(slice(p, f - e) for p, f, e in zip(begins, full, ends)))]


def pool_windows(shape, kernel, stride, begins, ends, dilation, ceil_mode):
    """Yield (output index, in-bounds input positions of that window) in row-major tap order."""
    out = []
    for L, k, s, b, e, d in zip(shape, kernel, stride, begins, ends, dilation):
        span = L + b + e - d * (k - 1) - 1
        o = (math.ceil(span / s) if ceil_mode else span // s) + 1
        if ceil_mode and (o - 1) * s >= L + b:
            o -= 1
        out.append(o)
    for o in itertools.product(*map(range, out)):
        taps = [[oi * s - b + t * d for t in range(k)]
                for oi, s, b, k, d in zip(o, stride, begins, kernel, dilation)]
        yield o, [p for p in itertools.product(*taps)
                  if all(0 <= pi < L for pi, L in zip(p, shape))], out


def ref_pool(x, dy, mode, kernel, stride, begins, ends, dilation, ceil_mode):
    """Pooled output and the input gradient for output gradient ``dy`` (None: skip)."""
    windows = list(pool_windows(x.shape[2:], kernel, stride, begins, ends, dilation, ceil_mode))
    y = np.zeros(x.shape[:2] + tuple(windows[0][2]))
    dx = np.zeros_like(x)
    for n, c in itertools.product(range(x.shape[0]), range(x.shape[1])):
        for o, positions, _ in windows:
            vals = [x[(n, c, *p)] for p in positions]
            if mode == "max":
                y[(n, c, *o)] = max(vals)
                if dy is not None:
                    dx[(n, c, *positions[vals.index(max(vals))])] += dy[(n, c, *o)]
            else:
                y[(n, c, *o)] = sum(vals) / len(vals)
                for p in positions:
                    if dy is not None:
                        dx[(n, c, *p)] += dy[(n, c, *o)] / len(vals)
    return y, dx


# -- helpers -----------------------------------------------------------------------------------
def forward(name, args, kwargs):
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    got, _ = run_forward(REGISTRY[name], Sample(tuple(args), kwargs), arrays, optimize=True)
    return got[0]


def backward(name, args, kwargs):
    """Gradients of sum(dy * op(args)) for random dy; returns (grads, dy)."""
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    grads, seeds, _ = gradients(REGISTRY[name], Sample(tuple(args), kwargs), arrays,
                                np.random.default_rng(5))
    return grads, seeds[0]


def normal(*shape):
    return np.random.default_rng(sum(shape)).normal(size=shape)


# -- convolution -------------------------------------------------------------------------------
CONV_CASES = [
    ((2, 3, 6, 5), (4, 3, 3, 2), {}, (2, 4, 4, 4)),
    ((1, 2, 7, 8), (3, 2, 3, 3), {"stride": (2, 3), "padding": (1, 0, 2, 1)}, (1, 3, 4, 3)),
    ((1, 2, 7, 6), (2, 2, 2, 3), {"dilation": (3, 2), "padding": (0, 1, 1, 0)}, (1, 2, 5, 3)),
    ((2, 4, 5, 5), (6, 2, 3, 3), {"groups": 2, "stride": (2, 2), "pad_type": "same_upper"},
     (2, 6, 3, 3)),
    ((1, 4, 6, 5), (4, 1, 2, 2), {"groups": 4, "stride": (2, 2), "pad_type": "same_lower"},
     (1, 4, 3, 3)),
    ((1, 2, 5, 5), (1, 2, 3, 3), {"padding": (2, 2, 2, 2), "pad_type": "valid"}, (1, 1, 3, 3)),
    ((2, 3, 10), (2, 3, 3), {"stride": (3,), "padding": (2, 1), "dilation": (2,)}, (2, 2, 3)),
    ((2, 1, 4, 5, 3), (2, 1, 2, 2, 2), {"stride": (2, 1, 1), "padding": (1, 0, 0, 0, 1, 1)},
     (2, 2, 2, 5, 3)),
    # more channels than output columns: the kernels go through channels-last data
    ((2, 6, 5, 4), (4, 6, 3, 3), {}, (2, 4, 3, 2)),
    ((2, 7, 6, 7), (3, 7, 2, 3), {"stride": (2, 2), "padding": (1, 0, 0, 1), "dilation": (1, 2)},
     (2, 3, 3, 2)),
    ((2, 5, 6), (4, 5, 3), {"stride": (2,), "padding": (1, 0)}, (2, 4, 3)),
]


def _conv_geometry(x_shape, w_shape, kw):
    n = len(x_shape) - 2
    stride = kw.get("stride", (1,) * n)
    dilation = kw.get("dilation", (1,) * n)
    begins, ends = ref_pads(kw.get("pad_type", "not_set"), x_shape[2:], w_shape[2:], stride,
                            dilation, kw.get("padding"))
    return stride, begins, ends, dilation, kw.get("groups", 1)


@pytest.mark.parametrize(("x_shape", "w_shape", "kw", "out"), CONV_CASES)
def test_conv_matches_loop_reference(x_shape, w_shape, kw, out) -> None:
    x, w = normal(*x_shape), normal(*w_shape)
    got = forward("conv", (x, w), kw)
    expected, _, _ = ref_conv(x, w, *_conv_geometry(x_shape, w_shape, kw))
    assert got.shape == out == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(("x_shape", "w_shape", "kw", "out"), CONV_CASES)
def test_conv_gradients_match_loop_reference(x_shape, w_shape, kw, out) -> None:
    x, w = normal(*x_shape), normal(*w_shape)
    (dx, dw), dy = backward("conv", (x, w), kw)
    _, expected_dx, expected_dw = ref_conv(x, w, *_conv_geometry(x_shape, w_shape, kw), dy=dy)
    np.testing.assert_allclose(dx, expected_dx, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dw, expected_dw, rtol=1e-10, atol=1e-12)


CONV_TRANSPOSE_CASES = [
    ((2, 3, 3, 4), (3, 2, 3, 3), {}, (2, 2, 5, 6)),
    ((1, 2, 3, 3), (2, 3, 3, 2), {"stride": (2, 3), "padding": (1, 0, 0, 2),
                                  "output_padding": (1, 2)}, (1, 3, 7, 8)),
    ((1, 4, 3, 2), (4, 1, 2, 3), {"groups": 2, "dilation": (2, 1)}, (1, 2, 5, 4)),
    ((2, 2, 4), (2, 3, 3), {"stride": (2,), "pad_type": "same_upper"}, (2, 3, 8)),
    ((1, 2, 4), (2, 1, 4), {"stride": (3,), "pad_type": "same_lower"}, (1, 1, 12)),
    ((1, 2, 3, 3), (2, 2, 3, 3), {"stride": (2, 2), "output_shape": (6, 5)}, (1, 2, 6, 5)),
    ((1, 1, 2, 2, 3), (1, 2, 2, 2, 2), {"stride": (2, 1, 2), "padding": (1, 0, 0, 0, 1, 1)},
     (1, 2, 3, 2, 5)),
]


def _transpose_geometry(x_shape, w_shape, kw):
    n = len(x_shape) - 2
    stride = kw.get("stride", (1,) * n)
    dilation = kw.get("dilation", (1,) * n)
    extra = kw.get("output_padding", (0,) * n)
    full = [s * (L - 1) + e + d * (k - 1) + 1
            for L, e, k, s, d in zip(x_shape[2:], extra, w_shape[2:], stride, dilation)]
    pad_type = kw.get("pad_type", "not_set")
    if "output_shape" in kw or pad_type.startswith("same"):
        target = kw.get("output_shape") or [L * s for L, s in zip(x_shape[2:], stride)]
        total = [f - t for f, t in zip(full, target)]
        upper = pad_type == "same_upper"
        begins = [p // 2 if upper else p - p // 2 for p in total]
        ends = [p - b for p, b in zip(total, begins)]
    else:
        begins, ends = ref_pads(pad_type, x_shape[2:], w_shape[2:], stride, dilation,
                                kw.get("padding"))
    return stride, begins, ends, dilation, kw.get("groups", 1), extra


@pytest.mark.parametrize(("x_shape", "w_shape", "kw", "out"), CONV_TRANSPOSE_CASES)
def test_conv_transpose_matches_loop_reference(x_shape, w_shape, kw, out) -> None:
    x, w = normal(*x_shape), normal(*w_shape)
    got = forward("conv_transpose", (x, w), kw)
    expected = ref_conv_transpose(x, w, *_transpose_geometry(x_shape, w_shape, kw))
    assert got.shape == out == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


def test_conv_transpose_is_the_adjoint_of_conv() -> None:
    x, w, y = normal(2, 4, 7, 6), normal(6, 2, 3, 2), normal(2, 6, 3, 3)
    kw = {"stride": (2, 2), "padding": (1, 0, 0, 1), "groups": 2, "dilation": (1, 2)}
    lhs = np.sum(forward("conv", (x, w), kw) * y)
    rhs = np.sum(forward("conv_transpose", (y, w), {**kw, "output_padding": (1, 0)}) * x)
    assert lhs == pytest.approx(rhs, rel=1e-10)


def test_conv_errors_name_the_op_and_source_line() -> None:
    ir = xlgraph.Ir()
    with ir.main_graph:
        x = xlgraph.variable(np.zeros((1, 3, 5, 5), np.float32))
        w = xlgraph.variable(np.zeros((4, 2, 3, 3), np.float32))
        with pytest.raises(ShapeError, match=r"conv: .*channels.*test_ops_nn_reference.py:\d+"):
            ops.conv(x, w)
        with pytest.raises(ShapeError, match=r"conv: stride needs 2 values.*\[created at"):
            ops.conv(x, xlgraph.variable(np.zeros((4, 3, 3, 3), np.float32)), stride=(1, 2, 1))
        with pytest.raises(ShapeError, match="does not fit"):
            ops.conv(x, xlgraph.variable(np.zeros((4, 3, 6, 1), np.float32)))
        with pytest.raises(ValueError, match="pad type"):
            ops.conv(x, xlgraph.variable(np.zeros((4, 3, 3, 3), np.float32)), pad_type="same")


# -- pooling -----------------------------------------------------------------------------------
POOL_CASES = [
    ((2, 2, 6, 6), {"kernel_size": (2, 2), "stride": (2, 2)}),
    ((1, 2, 5, 4), {"kernel_size": (2, 3)}),  # PopXL: stride defaults to 1
    ((1, 2, 7, 7), {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 0, 1, 2),
                    "ceil_mode": True}),
    ((1, 1, 8, 6), {"kernel_size": (3, 2), "stride": (2, 3), "dilation": (2, 1)}),
    ((1, 2, 5, 7), {"kernel_size": (2, 3), "stride": (2, 2), "auto_pad": "same_upper"}),
    ((1, 2, 5, 6), {"kernel_size": (3, 2), "stride": (3, 2), "auto_pad": "same_lower",
                    "ceil_mode": True}),
    ((1, 1, 4, 6), {"kernel_size": (3, 3), "padding": (1, 1, 1, 1), "auto_pad": "valid"}),
    ((2, 3, 9), {"kernel_size": (3,), "stride": (2,), "padding": (1, 1), "ceil_mode": True}),
    ((1, 1, 4, 5, 3), {"kernel_size": (2, 2, 2), "stride": (2, 1, 1), "padding": (0, 1, 0,
                                                                                  1, 0, 1)}),
]


def _pool_geometry(shape, kw):
    n = len(shape) - 2
    kernel = kw["kernel_size"]
    stride = kw.get("stride") or (1,) * n
    dilation = kw.get("dilation") or (1,) * n
    begins, ends = ref_pads(kw.get("auto_pad", "not_set"), shape[2:], kernel, stride, dilation,
                            kw.get("padding"))
    return kernel, stride, begins, ends, dilation, kw.get("ceil_mode", False)


@pytest.mark.parametrize("mode", ["max", "average"])
@pytest.mark.parametrize(("shape", "kw"), POOL_CASES)
def test_pool_forward_and_gradient_match_loop_reference(mode, shape, kw) -> None:
    x = normal(*shape)
    name = f"{mode}_pool"
    (dx,), dy = backward(name, (x,), kw)
    y, expected_dx = ref_pool(x, dy, "max" if mode == "max" else "avg",
                              *_pool_geometry(shape, kw))
    np.testing.assert_allclose(forward(name, (x,), kw), y, rtol=1e-12)
    np.testing.assert_allclose(dx, expected_dx, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kw", [
    {"kernel_size": (2, 2), "stride": (2, 2)},
    {"kernel_size": (3, 2), "stride": (1, 2), "padding": (1, 0, 1, 1)},
])
def test_max_pool_gradient_goes_to_the_first_of_tied_maxima(kw) -> None:
    x = np.random.default_rng(3).integers(0, 3, (2, 2, 6, 6)).astype(float)
    x[0, 0] = 0.0  # a whole channel of ties, like the blank border of an MNIST digit
    (dx,), dy = backward("max_pool", (x,), kw)
    _, expected = ref_pool(x, dy, "max", *_pool_geometry(x.shape, kw))
    np.testing.assert_allclose(dx, expected, rtol=1e-12, atol=1e-15)


def test_pool_errors() -> None:
    ir = xlgraph.Ir()
    with ir.main_graph:
        x = xlgraph.variable(np.zeros((1, 1, 4, 4), np.float32))
        with pytest.raises(ShapeError, match=r"max_pool: .*does not fit"):
            ops.max_pool(x, kernel_size=(5, 2))
        with pytest.raises(ShapeError, match="entirely outside"):
            ops.average_pool(x, kernel_size=(2, 2), padding=(2, 0, 0, 0))
        with pytest.raises(ValueError, match="in_dilations"):
            ops.max_pool(x, kernel_size=(2, 2), in_dilations=(2, 2))


# -- normalisation -----------------------------------------------------------------------------
def ref_group_norm(x, w, b, groups, eps):
    y = np.empty_like(x)
    per = x.shape[1] // groups
    for n, g in itertools.product(range(x.shape[0]), range(groups)):
        block = x[n, g * per:(g + 1) * per]
        mean = sum(block.ravel()) / block.size
        var = sum((v - mean) ** 2 for v in block.ravel()) / block.size
        for c in range(g * per, (g + 1) * per):
            y[n, c] = (x[n, c] - mean) / math.sqrt(var + eps) * w[c] + b[c]
    return y


@pytest.mark.parametrize(("shape", "groups"), [((2, 6, 3, 2), 3), ((3, 4, 5), 1), ((2, 4), 4)])
def test_group_norm_matches_loop_reference(shape, groups) -> None:
    x, w, b = normal(*shape), normal(shape[1]), normal(shape[1]) + 1
    got = forward("group_norm", (x, w, b), {"num_groups": groups, "eps": 1e-3})
    np.testing.assert_allclose(got, ref_group_norm(x, w, b, groups, 1e-3), rtol=1e-9)


def test_layer_norm_normalises_each_row_of_the_last_axis() -> None:
    x, w, b = normal(2, 3, 5), normal(5), normal(5)
    got = forward("layer_norm", (x, w, b), {})
    rows = x.reshape(-1, 5)
    expected = [ref_group_norm(r[None, :, None], w, b, 1, 1e-5)[0, :, 0] for r in rows]
    np.testing.assert_allclose(got.reshape(-1, 5), expected, rtol=1e-9)


def test_batch_norm_inference_matches_loop_reference() -> None:
    x, scale, bias, mean = normal(2, 3, 4), normal(3), normal(3), normal(3)
    var = np.abs(normal(3)) + 0.5
    got = forward("batch_norm_inference", (x, scale, bias, mean, var), {"epsilon": 1e-3})
    expected = np.empty_like(x)
    for n, c, i in itertools.product(*map(range, x.shape)):
        expected[n, c, i] = (x[n, c, i] - mean[c]) / math.sqrt(var[c] + 1e-3) * scale[c] + bias[c]
    np.testing.assert_allclose(got, expected, rtol=1e-10)
