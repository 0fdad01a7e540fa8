"""Forward values and gradients against ``torch.nn.functional`` (skipped without torch).

xlgraph gradients come from ``transforms.autodiff`` on a subgraph holding the op; torch's from
``torch.autograd`` with the same output gradient. Everything runs in float64.
"""

from __future__ import annotations

import numpy as np
import pytest
from op_harness import gradients, run_forward

import xlgraph
from xlgraph import ops
from xlgraph.op import REGISTRY, Sample

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _normal(*shape: int) -> np.ndarray:
    return np.random.default_rng(len(shape) * 100 + sum(shape)).normal(size=shape)


def _check(name, args, kwargs, torch_fn, grads_for=None) -> None:
    """Compare op ``name`` on ``args`` with ``torch_fn`` (called on the arrays as tensors),
    forward and the gradients of the first ``grads_for`` float inputs (default: all)."""
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    sample = Sample(tuple(args), kwargs)
    (got,), _ = run_forward(REGISTRY[name], sample, arrays, optimize=True)
    grads, (dy,), _ = gradients(REGISTRY[name], sample, arrays, np.random.default_rng(7))
    tensors = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    expected = torch_fn(*tensors)
    expected.backward(torch.tensor(dy))
    np.testing.assert_allclose(got, expected.detach().numpy(), rtol=1e-9, atol=1e-12)
    wanted = [t for t in tensors if t.requires_grad][:grads_for]
    assert len(grads) >= len(wanted)
    for g, t in zip(grads, wanted):
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-9, atol=1e-12)


# -- convolution -------------------------------------------------------------------------------
def _padded(x, pads):
    """torch pads last dim first: PopXL (begins..., ends...) -> F.pad order."""
    n = len(pads) // 2
    order = []
    for i in reversed(range(n)):
        order += [pads[i], pads[n + i]]
    return F.pad(x, order)


CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


@pytest.mark.parametrize(("x_shape", "w_shape", "kw"), [
    ((2, 3, 9, 8), (4, 3, 3, 2), {"stride": (2, 1), "padding": (1, 2, 1, 2), "dilation": (1, 2)}),
    ((2, 4, 7, 7), (6, 2, 3, 3), {"stride": (2, 2), "padding": (1, 1, 1, 1), "groups": 2}),
    ((1, 2, 6, 7), (3, 2, 3, 4), {"padding": (0, 2, 1, 1), "stride": (2, 3)}),
    ((2, 3, 10), (5, 3, 4), {"stride": (2,), "padding": (1, 2), "dilation": (2,)}),
    ((1, 2, 5, 4, 4), (3, 2, 2, 3, 2), {"stride": (1, 2, 1), "padding": (1, 0, 1, 1, 0, 1)}),
    ((8, 1, 12, 12), (4, 1, 3, 3), {}),  # the MNIST CNN's first layer
])
def test_conv(x_shape, w_shape, kw) -> None:
    n = len(x_shape) - 2
    geo = {"stride": kw.get("stride", 1), "dilation": kw.get("dilation", 1),
           "groups": kw.get("groups", 1)}
    pads = kw.get("padding", (0,) * 2 * n)
    _check("conv", (_normal(*x_shape), _normal(*w_shape)), kw,
           lambda x, w: CONV[n](_padded(x, pads), w, **geo))


@pytest.mark.filterwarnings("ignore:Using padding='same'")
def test_conv_same_upper_matches_torch_same_padding() -> None:
    _check("conv", (_normal(1, 2, 6, 7), _normal(3, 2, 4, 3)), {"pad_type": "same_upper"},
           lambda x, w: F.conv2d(x, w, padding="same"))


@pytest.mark.parametrize(("x_shape", "w_shape", "kw"), [
    ((2, 3, 4, 5), (3, 2, 3, 3), {"stride": (2, 2), "padding": (1, 1), "output_padding": (1, 1)}),
    ((1, 4, 3, 3), (4, 3, 2, 3), {"stride": (1, 2), "padding": (0, 1), "dilation": (2, 1),
                                  "groups": 2}),
    ((2, 2, 5), (2, 3, 3), {"stride": (3,), "padding": (1,), "output_padding": (2,)}),
    ((1, 2, 2, 3, 2), (2, 1, 2, 2, 3), {"stride": (2, 1, 2), "padding": (0, 1, 1)}),
])
def test_conv_transpose(x_shape, w_shape, kw) -> None:
    n = len(x_shape) - 2
    ours = {**kw, "padding": tuple(kw["padding"]) * 2}
    _check("conv_transpose", (_normal(*x_shape), _normal(*w_shape)), ours,
           lambda x, w: CONV_T[n](x, w, **kw))


# -- pooling -----------------------------------------------------------------------------------
POOLS = [
    ((4, 3, 8, 8), {"kernel_size": (2, 2), "stride": (2, 2)}),
    ((2, 2, 7, 9), {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1),
                    "ceil_mode": True}),
    ((2, 2, 8, 7), {"kernel_size": (3, 2), "stride": (1, 2), "padding": (1, 0)}),
    ((2, 3, 11), {"kernel_size": (3,), "stride": (2,), "padding": (1,), "ceil_mode": True}),
    ((1, 2, 5, 6, 4), {"kernel_size": (2, 3, 2), "stride": (2, 2, 1), "padding": (1, 1, 0)}),
]
MAX_POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
AVG_POOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


def _pool_kwargs(kw):
    ours = {**kw, "padding": tuple(kw.get("padding", (0,) * len(kw["kernel_size"]))) * 2}
    return ours, {k: v for k, v in kw.items() if k != "kernel_size"}


@pytest.mark.parametrize(("shape", "kw"), POOLS)
def test_max_pool(shape, kw) -> None:
    ours, theirs = _pool_kwargs(kw)
    _check("max_pool", (_normal(*shape),), ours,
           lambda x: MAX_POOL[len(shape) - 2](x, kw["kernel_size"], **theirs))


def test_max_pool_with_dilation_and_ties() -> None:
    x = np.random.default_rng(0).integers(0, 2, (2, 2, 9, 8)).astype(float)
    kw = {"kernel_size": (2, 3), "stride": (2, 1), "dilation": (2, 2), "padding": (1, 1)}
    ours, theirs = _pool_kwargs(kw)
    _check("max_pool", (x,), ours, lambda t: F.max_pool2d(t, kw["kernel_size"], **theirs))


@pytest.mark.parametrize(("shape", "kw"), POOLS)
def test_average_pool_excludes_padding_like_torch(shape, kw) -> None:
    ours, theirs = _pool_kwargs(kw)
    _check("average_pool", (_normal(*shape),), ours,
           lambda x: AVG_POOL[len(shape) - 2](x, kw["kernel_size"], count_include_pad=False,
                                              **theirs))


# -- normalisation and activations -------------------------------------------------------------
def test_group_norm() -> None:
    _check("group_norm", (_normal(3, 6, 4, 5), _normal(6), _normal(6)),
           {"num_groups": 3, "eps": 1e-4}, lambda x, w, b: F.group_norm(x, 3, w, b, 1e-4))


def test_layer_norm() -> None:
    _check("layer_norm", (_normal(2, 3, 7), _normal(7), _normal(7)), {},
           lambda x, w, b: F.layer_norm(x, (7,), w, b, 1e-5))


def test_batch_norm_inference() -> None:
    var = np.abs(_normal(4)) + 0.3
    _check("batch_norm_inference", (_normal(3, 4, 5), _normal(4), _normal(4), _normal(4), var),
           {"epsilon": 1e-3},
           lambda x, s, b, m, v: F.batch_norm(x, m.detach(), v.detach(), s, b, False, 0.1, 1e-3),
           grads_for=3)


@pytest.mark.parametrize(("name", "kwargs", "fn"), [
    ("log_softmax", {"axis": 1}, lambda x: F.log_softmax(x, dim=1)),
    ("log_softmax", {"axis": 0}, lambda x: F.log_softmax(x, dim=0)),
    ("sigmoid", {}, torch.sigmoid),
    ("swish", {}, F.silu),
    ("logsumexp", {"axis": (1,)}, lambda x: torch.logsumexp(x, dim=1)),
])
def test_activation(name, kwargs, fn) -> None:
    _check(name, (_normal(4, 6) * 3,), kwargs, fn)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore_index", [None, 2])
@pytest.mark.parametrize("log_prob", [True, False])
def test_nll_loss(reduction, ignore_index, log_prob) -> None:
    rng = np.random.default_rng(4)
    probs = rng.dirichlet(np.ones(5), 8) * 0.9 + 0.02
    labels = np.array([0, 2, 4, 1, 2, 3, 2, 0], np.int32)
    theirs = {"reduction": reduction, "ignore_index": -100 if ignore_index is None else 2}
    _check("nll_loss", (np.log(probs) if log_prob else probs, labels),
           {"ignore_index": ignore_index, "reduction": reduction, "log_prob": log_prob},
           lambda p, lab: F.nll_loss(p if log_prob else torch.log(p), lab.long(), **theirs))


# -- dropout -----------------------------------------------------------------------------------
def test_dropout_uses_torchs_scaling_convention() -> None:
    p, x = 0.3, np.random.default_rng(1).uniform(1, 2, (400, 500)).astype(np.float32)
    ir = xlgraph.Ir()
    with ir.main_graph:
        seed = xlgraph.variable(xlgraph.create_seeds(11), xlgraph.uint32)
        y = ops.dropout(xlgraph.variable(x), seed, p)
        out = xlgraph.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(out, y)
    with xlgraph.Session(ir, "cpu") as session:
        ours = session.run({})[out]
    theirs = F.dropout(torch.tensor(x), p, training=True).numpy()
    for y in (ours, theirs):
        kept = y != 0
        assert abs(kept.mean() - (1 - p)) < 0.005
        np.testing.assert_allclose(y[kept], x[kept] / (1 - p), rtol=1e-6)
