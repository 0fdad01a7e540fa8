"""xlgraph.nn layers against numpy (and torch when installed): wiring, inits and naming."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

import xlgraph
from xlgraph import TensorSpec, nn, ops

F32 = xlgraph.float32


def run_layer(layer: nn.Layer, *arrays: np.ndarray, seed: int = 0, in_subgraph: bool = True,
              **build_kwargs):
    """Run ``layer`` on ``arrays`` (as a called subgraph or inline in the main graph).

    Returns the output and the parameter values ``{name: array}``.
    """
    ir = xlgraph.Ir()
    specs = [TensorSpec(a.shape, xlgraph.dtypes.of_array(a)) for a in arrays]
    graph = ir.create_graph(layer, *specs, **build_kwargs) if in_subgraph else None
    with ir.main_graph:
        params = layer.create_variables(seed)
        xs = [xlgraph.constant(a, name=f"x{i}") for i, a in enumerate(arrays)]
        if graph is None:
            (y,) = [layer(*xs, **build_kwargs)]
        else:
            (y,) = ops.call(graph, *xs, inputs_dict=layer.inputs_dict(graph, params))
        out = xlgraph.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(out, y)
    with xlgraph.Session(ir) as session:
        result = session.run()[out]
        values = {k: session.get_tensor_data(v) for k, v in params.items()}
    return result, values


# -- numpy references ---------------------------------------------------------------------------
def np_conv2d(x, w, b, stride, padding):
    x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    win = sliding_window_view(x, w.shape[2:], axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("nchwij,mcij->nmhw", win, w) + b[None, :, None, None]


def np_max_pool(x, k, stride):
    return sliding_window_view(x, (k, k), axis=(2, 3))[:, :, ::stride, ::stride].max(axis=(4, 5))


def np_group_norm(x, groups, weight, bias, eps=1e-5):
    n, c = x.shape[:2]
    g = x.reshape(n, groups, -1)
    norm = (g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + eps)
    shape = (1, c) + (1,) * (x.ndim - 2)
    return norm.reshape(x.shape) * weight.reshape(shape) + bias.reshape(shape)


def np_log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


RNG = np.random.default_rng(0)


# -- layers -------------------------------------------------------------------------------------
@pytest.mark.parametrize("in_subgraph", [True, False])
@pytest.mark.parametrize("bias", [True, False])
def test_linear(in_subgraph, bias):
    x = RNG.normal(size=(5, 7)).astype(np.float32)
    y, p = run_layer(nn.Linear(7, 3, bias=bias), x, in_subgraph=in_subgraph)
    want = x @ p["weight"].T + (p["bias"] if bias else 0)
    assert sorted(p) == (["bias", "weight"] if bias else ["weight"])
    assert p["weight"].shape == (3, 7)  # torch's layout
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("stride,padding", [(1, 0), (2, 1)])
def test_conv2d(stride, padding):
    x = RNG.normal(size=(2, 3, 9, 8)).astype(np.float32)
    y, p = run_layer(nn.Conv2d(3, 4, 3, stride=stride, padding=padding), x)
    want = np_conv2d(x, p["weight"], p["bias"], stride, padding)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)


def test_max_pool_defaults_to_torch_stride():
    x = RNG.normal(size=(2, 3, 8, 6)).astype(np.float32)
    y, _ = run_layer(nn.MaxPool2d(2), x)
    assert y.shape == (2, 3, 4, 3)
    np.testing.assert_array_equal(y, np_max_pool(x, 2, 2))
    y1, _ = run_layer(nn.MaxPool2d(3, stride=1), x)
    np.testing.assert_array_equal(y1, np_max_pool(x, 3, 1))


def test_group_norm():
    x = RNG.normal(size=(2, 6, 4, 5)).astype(np.float32) * 3 + 1
    y, p = run_layer(nn.GroupNorm(3, 6), x)
    np.testing.assert_array_equal(p["weight"], np.ones(6, np.float32))
    np.testing.assert_array_equal(p["bias"], np.zeros(6, np.float32))
    np.testing.assert_allclose(y, np_group_norm(x, 3, p["weight"], p["bias"]), rtol=1e-4,
                               atol=1e-5)


def test_relu_flatten_and_dropout_off_without_seed():
    x = RNG.normal(size=(2, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(run_layer(nn.ReLU(), x)[0], np.maximum(x, 0))
    np.testing.assert_array_equal(run_layer(nn.Flatten(), x)[0], x.reshape(2, 12))
    np.testing.assert_array_equal(run_layer(nn.Dropout(0.5), x)[0], x)


def test_dropout_with_seed_scales_survivors():
    x = RNG.uniform(1, 2, size=(40, 50)).astype(np.float32)
    seeds = [xlgraph.create_seeds(s) for s in (1, 2)]
    outs = [run_layer(nn.Dropout(0.3), x, s)[0] for s in seeds]
    for y in outs:
        kept = y != 0
        assert 0.6 < kept.mean() < 0.8
        np.testing.assert_allclose(y[kept], x[kept] / 0.7, rtol=1e-6)
    assert (outs[0] != outs[1]).any()


def test_cross_entropy_matches_numpy():
    logits = RNG.normal(size=(6, 4)).astype(np.float32) * 3
    labels = RNG.integers(0, 4, 6).astype(np.int32)

    class Loss(nn.Layer):
        def build(self, z, y):
            return nn.cross_entropy(z, y)

    loss, _ = run_layer(Loss(), logits, labels)
    want = -np_log_softmax(logits.astype(np.float64))[np.arange(6), labels].mean()
    np.testing.assert_allclose(loss, want, rtol=1e-5)


# -- initialisation -----------------------------------------------------------------------------
@pytest.mark.parametrize("layer,fan_in", [(nn.Linear(300, 200), 300),
                                          (nn.Conv2d(8, 300, 5), 8 * 25)])
def test_default_init_is_torch_uniform(layer, fan_in):
    ir = xlgraph.Ir()
    with ir.main_graph:
        params = layer.create_variables(seed=3)
    bound = 1 / np.sqrt(fan_in)
    for name in ("weight", "bias"):
        w = params[name].initial_data
        assert np.abs(w).max() <= bound
        assert np.abs(w).max() > 0.9 * bound
        np.testing.assert_allclose(w.std(), bound / np.sqrt(3), rtol=0.1)


@pytest.mark.parametrize("make", [lambda m: m.Linear(300, 200), lambda m: m.Conv2d(8, 300, 5)])
def test_init_spread_matches_torch(make):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)  # a statistical comparison: fixed draws keep it from flaking
    ours = make(nn)
    ir = xlgraph.Ir()
    with ir.main_graph:
        params = ours.create_variables(seed=0)
    theirs = dict(make(torch.nn).named_parameters())
    for name, v in params.items():
        t = theirs[name].detach().numpy()
        assert t.shape == v.shape
        np.testing.assert_allclose(v.initial_data.std(), t.std(), rtol=0.1)
        np.testing.assert_allclose(np.abs(v.initial_data).max(), np.abs(t).max(), rtol=0.05)


def test_init_is_deterministic_per_seed():
    def values(seed):
        ir = xlgraph.Ir()
        with ir.main_graph:
            return nn.Linear(4, 3).create_variables(seed)["weight"].initial_data

    np.testing.assert_array_equal(values(1), values(1))
    assert not np.array_equal(values(1), values(2))


# -- parameters by name -------------------------------------------------------------------------
class Block(nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.norm = nn.GroupNorm(2, 4)

    def build(self, x):
        return self.fc(x)


class Net(nn.Layer):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.head = nn.Linear(4, 2, bias=False)

    def build(self, x):
        return self.head(ops.relu(self.block(x)))


def test_parameters_are_collected_by_dotted_name():
    net = Net()
    assert list(net.parameters()) == ["block.fc.weight", "block.fc.bias", "block.norm.weight",
                                      "block.norm.bias", "head.weight"]
    assert list(net.block.parameters()) == ["fc.weight", "fc.bias", "norm.weight", "norm.bias"]
    ir = xlgraph.Ir()
    graph = ir.create_graph(net, TensorSpec((3, 4), F32))
    # only the parameters the build used become graph inputs, named by their paths
    assert [t.name for t in graph.inputs] == ["x", "block.fc.weight", "block.fc.bias",
                                              "head.weight"]
    with ir.main_graph:
        variables = net.create_variables()
    assert [v.name for v in variables.values()] == list(net.parameters())
    wiring = net.inputs_dict(graph, variables)
    assert {k.name: v.name for k, v in wiring.items()} == {
        n: n for n in ["block.fc.weight", "block.fc.bias", "head.weight"]}


def test_nested_model_output():
    net = Net()
    x = RNG.normal(size=(3, 4)).astype(np.float32)
    y, p = run_layer(net, x)
    h = np.maximum(x @ p["block.fc.weight"].T + p["block.fc.bias"], 0)
    np.testing.assert_allclose(y, h @ p["head.weight"].T, rtol=1e-5, atol=1e-6)


def test_building_in_main_graph_needs_variables():
    ir = xlgraph.Ir()
    with ir.main_graph, pytest.raises(RuntimeError, match="create_variables"):
        nn.Linear(2, 2)(xlgraph.constant(np.ones((1, 2), np.float32)))


def test_declaration_errors():
    class Forgot(nn.Layer):
        def __init__(self):
            self.fc = nn.Linear(2, 2)

    with pytest.raises(AttributeError, match="super"):
        Forgot()
    layer = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="twice"):
        layer.add_parameter("weight", (2,), nn.zeros_init)
    with pytest.raises(ValueError, match="divisible"):
        nn.GroupNorm(4, 6)
    with pytest.raises(ValueError, match="probability"):
        nn.Dropout(1.0)
