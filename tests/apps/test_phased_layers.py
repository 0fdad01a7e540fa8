"""Phased execution as the GPT applications run it: every decoder layer's weights live in
one entry of remote buffers (``named_variable_buffers`` with one entry per layer,
``init_remote``), a single layer graph is reused, and each phase loads its layer's weights
(``load_remote_graph``) before calling it; the backward pass walks the layers in reverse.
A stack of two GPT-2 blocks over 1, 2 and 4 tensor-parallel replicas matches two
``transformers`` ``GPT2Block``s: output, input gradient and each layer's weight gradients."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import xlgraph as popxl
import xlgraph.addons as addons
from apps.gpt import GPT2Block
from apps.harness import TinyConfig, grads_as_weights
from xlgraph.addons import NamedTensors

transformers = pytest.importorskip("transformers")

from transformers import GPT2Config  # noqa: E402
from transformers.models.gpt2.modeling_gpt2 import GPT2Block as HFGPT2Block  # noqa: E402

LAYERS = 2


def phased_case(tp: int) -> dict[str, float]:
    cfg = TinyConfig(tensor_parallel=tp)
    torch.manual_seed(0)
    hf_config = GPT2Config(n_embd=cfg.hidden_size, n_head=cfg.heads, n_inner=cfg.ffn_size,
                           n_positions=cfg.sequence_length, activation_function="gelu_new",
                           resid_pdrop=0.0, attn_pdrop=0.0, embd_pdrop=0.0)
    hf = [HFGPT2Block(hf_config).eval() for _ in range(LAYERS)]
    with torch.no_grad():
        for p in (p for layer in hf for p in layer.parameters()):
            p.copy_(torch.randn_like(p) * (0.2 if p.dim() > 1 else 0.5))
    rows = cfg.micro_batch_size * cfg.sequence_length
    x = np.random.default_rng(1).normal(size=(rows, cfg.hidden_size)).astype(np.float32)
    seed = np.random.default_rng(2).normal(size=x.shape).astype(np.float32)
    tx = torch.tensor(x, requires_grad=True)
    h = tx.reshape(cfg.micro_batch_size, cfg.sequence_length, -1)
    for layer in hf:
        h = layer(h)[0]
    h.reshape(x.shape).backward(torch.tensor(seed))

    ir = popxl.Ir(replication=tp)
    with ir.main_graph:
        data, stream, t = addons.host_load(x, popxl.float32, "x")
        facts, layer_graph = GPT2Block(cfg).create_graph(t)
        buffers = addons.named_variable_buffers(facts, entries=LAYERS, shard_over_dict=False)
        variables = [facts.init_remote(buffers, i, prefix=f"layer{i}") for i in range(LAYERS)]
        load, names = addons.load_remote_graph(buffers, entries=LAYERS)
        grad_graph = addons.autodiff(layer_graph)
        calls = []
        for i in range(LAYERS):  # forward phases
            loaded = NamedTensors.pack(names, load.call(i))
            calls.append(layer_graph.bind(loaded).call_with_info(t))
            t = calls[-1].outputs[0]
        out_stream = addons.host_store(t)
        dx = popxl.constant(seed, name="seed")
        grad_streams = {}
        info = grad_graph.grad_graph_info
        for i in reversed(range(LAYERS)):  # backward phases
            call = grad_graph.call_with_info(dx, args=info.inputs_dict(calls[i]))
            to_grad = info.fwd_graph_ins_to_grad_parent_outs(call)
            dx = to_grad[layer_graph.graph.inputs[0]]
            for name, arg in layer_graph.args.to_dict().items():
                grad_streams[f"layer{i}.{name}"] = addons.host_store(to_grad[arg])
        dx_stream = addons.host_store(dx)
    weights, want = {}, {}
    for i in range(LAYERS):
        weights.update(GPT2Block.hf_mapping(cfg, variables[i], hf[i]))
        grads = GPT2Block.hf_mapping(cfg, variables[i], grads_as_weights(hf[i]))
        want.update({f"layer{i}.{k}": grads[v] for k, v in variables[i].to_dict().items()})
    feed = np.broadcast_to(data, (tp, *data.shape)) if tp > 1 else data
    with popxl.Session(ir, "cpu") as session:
        session.write_variables_data(weights)
        got = session.run({stream: feed})

    def per_replica(s: popxl.DeviceToHostStream) -> np.ndarray:
        return np.asarray(got[s]).reshape(tp, *s.shape)

    errors = {
        "out": max(np.abs(per_replica(out_stream)[r] - h.detach().numpy().reshape(x.shape)).max()
                   for r in range(tp)),
        "d_x": max(np.abs(per_replica(dx_stream)[r] - tx.grad.numpy()).max() for r in range(tp)),
    }
    for key, s in grad_streams.items():
        w = np.asarray(want[key])
        sharded = w.ndim > len(s.shape)
        errors[f"d_{key}"] = max(np.abs(per_replica(s)[r] - (w[r] if sharded else w)).max()
                                 for r in range(tp))
    return {k: float(v) for k, v in errors.items()}


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_phased_gpt2_layers_match_huggingface(tp: int) -> None:
    errors = phased_case(tp)
    assert len(errors) == 2 + LAYERS * 12
    assert max(errors.values()) < 1e-3, errors
