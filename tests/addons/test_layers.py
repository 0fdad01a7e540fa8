"""``popxl_addons.layers`` (and the custom-op layers), against numpy."""

from __future__ import annotations

import types

import numpy as np
import pytest

import xlgraph as popxl
import xlgraph.addons as addons
from tests.addons.helpers import fetch
from xlgraph import ops
from xlgraph.addons import layers
from xlgraph.addons.layers.layer_norm_distributed import LayerNormDistributed
from xlgraph.addons.layers.linear_fp8 import LinearFP8
from xlgraph.addons.layers.linear_gq import LinearGQ
from xlgraph.addons.ops.group_quantize_decompress import group_quantize_decompress_numpy
from xlgraph.addons.testing_utils import TensorInput, run_module
from xlgraph.fp8_utils import host_pow2scale_cast_from_fp8, host_pow2scale_cast_to_fp8

RNG = np.random.default_rng(0)


def torch_like(out_features, in_features, bias=True):
    return types.SimpleNamespace(
        weight=RNG.normal(size=(out_features, in_features)).astype(np.float32),
        bias=RNG.normal(size=out_features).astype(np.float32) if bias else None)


def test_linear_init_and_torch_mapping():
    x = RNG.normal(size=(3, 4)).astype(np.float32)
    nn = torch_like(5, 4)
    (y,) = run_module(layers.Linear(5), TensorInput(x),
                      weights=lambda v: layers.Linear.torch_mapping(v, nn))
    np.testing.assert_allclose(y, x @ nn.weight.T + nn.bias, rtol=1e-5, atol=1e-6)
    np.random.seed(0)
    ir = popxl.Ir()
    with ir.main_graph:
        facts, _ = layers.Linear(500).create_graph(popxl.TensorSpec((2, 40), popxl.float32))
        w = facts.init().weight.initial_data
    assert np.abs(w).max() <= 0.04 and 0.015 < w.std() < 0.02  # truncated at 2 sigma


def test_layer_norm_torch_mapping_of_a_multi_dimensional_torch_layer():
    """A torch layer norm over the last two dimensions is LayerNorm on the flattened rows:
    its (3, 4) weight and bias are mapped flat onto the (12,) variables."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    nn = torch.nn.LayerNorm((3, 4))
    with torch.no_grad():
        nn.weight.normal_()
        nn.bias.normal_()
    x = RNG.normal(size=(2, 3, 4)).astype(np.float32)
    (y,) = run_module(layers.LayerNorm(), TensorInput(x.reshape(2, 12)),
                      weights=lambda v: layers.LayerNorm.torch_mapping(v, nn))
    ref = nn(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(y.reshape(2, 3, 4), ref, rtol=1e-4, atol=1e-5)


def test_layer_norm_and_group_norm():
    x = RNG.normal(size=(2, 6)).astype(np.float32)
    (y,) = run_module(layers.LayerNorm(), TensorInput(x))
    ref = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="2-D"):
        run_module(layers.LayerNorm(), TensorInput(x.reshape(2, 3, 2)))
    img = RNG.normal(size=(2, 4, 3, 3)).astype(np.float32)
    nn = types.SimpleNamespace(weight=RNG.normal(size=4).astype(np.float32),
                               bias=RNG.normal(size=4).astype(np.float32))
    (y,) = run_module(layers.GroupNorm(2), TensorInput(img),
                      weights=lambda v: layers.GroupNorm.torch_mapping(v, nn))
    g = img.reshape(2, 2, -1)
    norm = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5))
    ref = norm.reshape(img.shape) * nn.weight[:, None, None] + nn.bias[:, None, None]
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)


def test_conv2d_string_padding_and_bias_attribute():
    img = RNG.normal(size=(1, 2, 5, 5)).astype(np.float32)
    conv = layers.Conv2D(3, 3, paddings="same_upper")
    (y,) = run_module(conv, TensorInput(img))
    assert y.shape == (1, 3, 5, 5)
    assert isinstance(conv.bias, popxl.Tensor) and conv.bias.shape == (1, 3, 1, 1)
    with pytest.raises(ValueError, match="paddings"):
        layers.Conv2D(3, 3, paddings="same")


def test_embedding_shards_pad_to_16_and_zero_rows_outside_the_shard():
    assert layers.Embedding.get_vocab_shard_size(20, 2) == 16
    assert layers.Embedding.get_vocab_shard_size(40, 1) == 48
    assert layers.Embedding.get_offsets(20, 2).tolist() == [0, 16]
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        stream = popxl.h2d_stream((3,), popxl.int32, "idx")
        emb = layers.Embedding(popxl.float32, 20, 4, replica_grouping=ir.replica_grouping(
            group_size=1))
        facts, graph = emb.create_graph(popxl.TensorSpec((3,), popxl.int32))
        variables = facts.init()
        (y,) = graph.bind(variables).call(ops.host_load(stream))
        (out,) = fetch(y)
    words = np.array([1, 17, 19])
    offsets = layers.Embedding.get_offsets(20, 2)
    with popxl.Session(ir, "cpu") as s:
        got = s.run({stream: np.stack([words - o for o in offsets]).astype(np.int32)})[out]
        table = s.get_tensor_data(variables.weight)
    assert table.shape == (2, 16, 4)
    np.testing.assert_allclose(got[0], [table[0, 1], np.zeros(4), np.zeros(4)])
    np.testing.assert_allclose(got[1], [np.zeros(4), table[1, 1], table[1, 3]])


def test_layer_norm_distributed_over_two_replicas():
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        stream = popxl.h2d_stream((3, 4), popxl.float32, "x")
        facts, graph = LayerNormDistributed(ir.replica_grouping()).create_graph(
            popxl.TensorSpec((3, 4), popxl.float32))
        assert facts.weight.replica_grouping.group_size == 1  # transposed: one per replica
        variables = facts.init()
        (y,) = graph.bind(variables).call(ops.host_load(stream))
        (out,) = fetch(y)
    x = RNG.normal(size=(3, 8)).astype(np.float32)
    with popxl.Session(ir, "cpu") as s:
        got = s.run({stream: np.stack([x[:, :4], x[:, 4:]])})[out]
    ref = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(np.concatenate(list(got), 1), ref, rtol=1e-4, atol=1e-5)


def fp8(a, scale, fmt):
    return host_pow2scale_cast_from_fp8(host_pow2scale_cast_to_fp8(a, fmt, scale), np.float64,
                                        -scale)


def amax_scale(a, big):
    return int(np.clip(np.floor(np.log2(big / np.abs(a).max())), -31, 31))


def test_linear_fp8_forward_and_its_build_grad():
    with pytest.raises(ValueError, match="scale_metric"):
        LinearFP8(4, scale_metric="max")
    x = RNG.normal(size=(4, 8)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        xv = popxl.variable(x, name="x")
        facts, fwd = LinearFP8(3).create_graph(xv)
        assert list(fwd.aux) == ["w_log2scale", "w_fp8", "x_log2scale", "x_fp8"]
        bwd = fwd.autodiff()  # the module's build_grad
        variables = facts.init()
        info = fwd.bind(variables).call_with_info(xv)
        d = RNG.normal(size=(4, 3)).astype(np.float32)
        dx, dw, db = bwd.call(popxl.constant(d), args=bwd.grad_graph_info.inputs_dict(info))
        streams = fetch(info.outputs[0], dx, dw, db)
    with popxl.Session(ir, "cpu") as s:
        outs = s.run({})
        w = s.get_tensor_data(variables.weight)
    y, gx, gw, gb = (outs[st] for st in streams)
    sw, sx = amax_scale(w, 240), amax_scale(x, 240)
    ref = fp8(x, sx, popxl.float8_143) @ fp8(w, sw, popxl.float8_143)
    np.testing.assert_allclose(y, ref, rtol=2e-3, atol=1e-4)  # float16 result
    np.testing.assert_allclose(gb, d.sum(0), rtol=1e-5)
    sg = int(np.clip(amax_scale(d, 57344) - 3, -31, 31))
    d8 = fp8(d, sg, popxl.float8_152)
    np.testing.assert_allclose(gx, d8 @ fp8(w, sw, popxl.float8_143).T, rtol=2e-3, atol=1e-4)
    np.testing.assert_allclose(gw, fp8(x, sx, popxl.float8_143).T @ d8, rtol=2e-3, atol=1e-4)


def test_linear_fp8_inline_call_raises():
    class Net(addons.Module):
        def __init__(self):
            super().__init__()
            self.fc = LinearFP8(2)

        def build(self, x):
            return self.fc(x)

    ir = popxl.Ir()
    with ir.main_graph, pytest.raises(Exception, match="`build_grad` has been implemented"):
        Net().create_graph(popxl.TensorSpec((2, 4), popxl.float32))


@pytest.mark.parametrize("dim", [-1, 0])
def test_linear_gq_decompresses_its_weight(dim):
    x = RNG.normal(size=(2, 16)).astype(np.float16)
    nn = torch_like(8, 16)
    mapping = {}

    def weights(v):
        mapping.update(LinearGQ.torch_mapping(v, nn, popxl.float16, group_size=8, dim=dim))
        return mapping

    (y,) = run_module(LinearGQ(8, group_size=8, dim=dim), TensorInput(x), weights=weights)
    codes, scale, shift = (mapping[k] for k in list(mapping)[:3])
    w = group_quantize_decompress_numpy(codes, scale, shift, -1)
    w = w.T if dim == 0 else w
    assert w.shape == (16, 8)
    np.testing.assert_allclose(w, nn.weight.T, atol=np.abs(nn.weight).max() / 7)  # 4 bits
    ref = x.astype(np.float32) @ w.astype(np.float32) + nn.bias
    np.testing.assert_allclose(y.astype(np.float32), ref, rtol=2e-2, atol=2e-2)
    with pytest.raises(ValueError, match="group_size"):
        run_module(LinearGQ(8), TensorInput(x))
