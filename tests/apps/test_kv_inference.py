"""Greedy generation with a KV cache, as the applications' inference scripts run it (one
token per sequence per step, the prompt fed token by token, the argmax fed back), gives
the tokens of ``transformers`` 4.25.1's ``GPT2LMHeadModel.generate`` (greedy, its own KV
cache) for a model built from a local config."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import xlgraph as popxl
import xlgraph.addons as addons
from apps.decode import GPT2DecodeStep
from apps.harness import TinyConfig
from xlgraph import ops

transformers = pytest.importorskip("transformers")

from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

CFG = TinyConfig(hidden_size=32, heads=4, sequence_length=12, vocab_size=48)
LAYERS, PROMPT = 2, 4


def hf_model() -> GPT2LMHeadModel:
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(
        n_embd=CFG.hidden_size, n_head=CFG.heads, n_layer=LAYERS, n_positions=CFG.sequence_length,
        vocab_size=CFG.vocab_size, n_inner=CFG.ffn_size, activation_function="gelu_new",
        layer_norm_epsilon=CFG.eps, resid_pdrop=0.0, attn_pdrop=0.0, embd_pdrop=0.0,
        bos_token_id=0, eos_token_id=0, pad_token_id=0)).eval()
    with torch.no_grad():  # larger weights than the default init: distinct, confident logits
        for p in hf.parameters():
            p.copy_(torch.randn_like(p) * (0.3 if p.dim() > 1 else 0.1))
    return hf


def greedy(hf: GPT2LMHeadModel, prompt: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """The generated tokens and each step's logits, decoding with the cache."""
    ir = popxl.Ir()
    with ir.main_graph:
        words_s = popxl.h2d_stream((CFG.micro_batch_size,), popxl.int32, "words")
        position_s = popxl.h2d_stream((), popxl.int32, "position")
        facts, graph = GPT2DecodeStep(CFG, LAYERS).create_graph(
            popxl.TensorSpec(words_s.shape, popxl.int32), popxl.TensorSpec((), popxl.int32))
        variables = facts.init()
        (logits,) = graph.bind(variables).call(ops.host_load(words_s), ops.host_load(position_s))
        logits_s = addons.host_store(logits)
    session = addons.TaskSession([words_s, position_s], [logits_s], variables, 1, ir, "cpu")
    tokens, steps = prompt.copy(), []
    with session:
        session.write_variables_data(GPT2DecodeStep.hf_mapping(CFG, variables, hf))
        for position in range(CFG.sequence_length - 1):
            out = session.run({words_s: tokens[:, position],
                               position_s: np.int32(position)})[logits_s]
            if position + 1 >= tokens.shape[1]:  # past the prompt: append the argmax
                steps.append(out)
                tokens = np.concatenate([tokens, out.argmax(-1)[:, None].astype(np.int32)], 1)
    return tokens, steps


def test_greedy_kv_cache_generation_gives_huggingface_tokens() -> None:
    hf = hf_model()
    prompt = np.random.default_rng(5).integers(1, CFG.vocab_size,
                                               (CFG.micro_batch_size, PROMPT)).astype(np.int32)
    tokens, logits = greedy(hf, prompt)
    with torch.no_grad():
        want = hf.generate(torch.tensor(prompt).long(), do_sample=False, num_beams=1,
                           max_length=CFG.sequence_length, min_length=CFG.sequence_length)
        full = hf(want[:, :-1]).logits.numpy()
    np.testing.assert_array_equal(tokens, want.numpy())
    for i, step in enumerate(logits):  # each decoded step's logits are the full pass's
        np.testing.assert_allclose(step, full[:, PROMPT - 1 + i], rtol=1e-4, atol=1e-4)
    assert len(set(tokens[:, PROMPT:].reshape(-1).tolist())) > 2  # not one repeated token
