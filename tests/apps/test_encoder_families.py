"""BERT's encoder layer, T5's relative-position attention (encoder and decoder) and Bloom's
ALiBi attention (application style, tests/apps/families.py) against ``transformers`` 4.25.1
at the tiny config over 1, 2 and 4 tensor-parallel replicas: outputs, input gradients and
every trained variable's gradient to 3 decimals."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import xlgraph as popxl
from apps.families import (
    BertLayer,
    BloomAttention,
    BloomBlock,
    T5Block,
    T5SelfAttention,
    relative_position_buckets,
)
from apps.harness import Result, TinyConfig, assert_float16_close, compare

transformers = pytest.importorskip("transformers")

from transformers import BertConfig, BloomConfig, T5Config  # noqa: E402
from transformers.models.bert.modeling_bert import BertLayer as HFBertLayer  # noqa: E402
from transformers.models.bloom.modeling_bloom import (  # noqa: E402
    BloomAttention as HFBloomAttention,
)
from transformers.models.bloom.modeling_bloom import BloomBlock as HFBloomBlock  # noqa: E402
from transformers.models.bloom.modeling_bloom import build_alibi_tensor  # noqa: E402
from transformers.models.t5.modeling_t5 import T5Attention as HFT5Attention  # noqa: E402
from transformers.models.t5.modeling_t5 import T5Block as HFT5Block  # noqa: E402

TP = [1, 2, 4]


def _randomise(module: torch.nn.Module) -> None:
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * (0.2 if p.dim() > 1 else 0.5))


def _rows(cfg: TinyConfig) -> np.ndarray:
    shape = (cfg.micro_batch_size * cfg.sequence_length, cfg.hidden_size)
    return np.random.default_rng(1).normal(size=shape).astype(np.float32)


def _bsh(cfg: TinyConfig, t: torch.Tensor) -> torch.Tensor:
    return t.reshape(cfg.micro_batch_size, cfg.sequence_length, cfg.hidden_size)


def bert_case(tp: int, dtype: popxl.dtype = popxl.float32) -> Result:
    cfg = TinyConfig(tensor_parallel=tp, eps=1e-12, dtype=dtype)
    torch.manual_seed(0)
    hf = HFBertLayer(BertConfig(hidden_size=cfg.hidden_size, num_attention_heads=cfg.heads,
                                intermediate_size=cfg.ffn_size, hidden_act="gelu",
                                layer_norm_eps=cfg.eps, hidden_dropout_prob=0.0,
                                attention_probs_dropout_prob=0.0)).eval()
    _randomise(hf)
    return compare(cfg, lambda: BertLayer(cfg), BertLayer.hf_mapping, hf,
                   lambda t: [hf(_bsh(cfg, t))[0].reshape(t.shape)], [_rows(cfg)])


def t5_case(tp: int, is_decoder: bool, dtype: popxl.dtype = popxl.float32) -> Result:
    cfg = TinyConfig(tensor_parallel=tp, dtype=dtype)
    torch.manual_seed(0)
    hf = HFT5Attention(T5Config(d_model=cfg.hidden_size, d_kv=cfg.head_dim, num_heads=cfg.heads,
                                d_ff=cfg.ffn_size, relative_attention_num_buckets=32,
                                relative_attention_max_distance=128, dropout_rate=0.0,
                                is_decoder=is_decoder),
                       has_relative_attention_bias=True).eval()
    _randomise(hf)
    seq = cfg.sequence_length
    mask = torch.triu(torch.full((1, 1, seq, seq), -1e4), 1) if is_decoder else None

    def forward(t: torch.Tensor) -> list[torch.Tensor]:
        return [hf(_bsh(cfg, t), mask=mask)[0].reshape(t.shape)]

    return compare(cfg, lambda: T5SelfAttention(cfg, is_decoder), T5SelfAttention.hf_mapping,
                   hf, forward, [_rows(cfg)])


def bloom_case(tp: int, dtype: popxl.dtype = popxl.float32, block: bool = False) -> Result:
    """Bloom's ALiBi attention plus residual, or (``block``) its whole block."""
    cfg = TinyConfig(tensor_parallel=tp, dtype=dtype)
    torch.manual_seed(0)
    hf_config = BloomConfig(hidden_size=cfg.hidden_size, n_head=cfg.heads,
                            attention_dropout=0.0, hidden_dropout=0.0, pretraining_tp=1,
                            slow_but_exact=False, layer_norm_epsilon=cfg.eps,
                            apply_residual_connection_post_layernorm=False)
    hf = (HFBloomBlock if block else HFBloomAttention)(hf_config).eval()
    _randomise(hf)
    b, seq = cfg.micro_batch_size, cfg.sequence_length
    alibi = build_alibi_tensor(torch.ones(b, seq), cfg.heads, torch.float32)
    causal = torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1).expand(b, 1, seq, seq)

    def forward(t: torch.Tensor) -> list[torch.Tensor]:
        x = _bsh(cfg, t)
        out = hf(x, alibi, causal) if block else hf(x, x, alibi, causal)
        return [out[0].reshape(t.shape)]

    module = BloomBlock if block else BloomAttention
    return compare(cfg, lambda: module(cfg), module.hf_mapping, hf, forward, [_rows(cfg)],
                   untrained=["alibi_slopes", "self_attention.alibi_slopes"])


@pytest.mark.parametrize("tp", TP)
def test_bert_layer_matches_huggingface(tp: int) -> None:
    errors = bert_case(tp).errors()
    assert max(errors.values()) < 1e-3, errors


@pytest.mark.parametrize("is_decoder", [False, True], ids=["encoder", "decoder"])
@pytest.mark.parametrize("tp", TP)
def test_t5_relative_attention_matches_huggingface(tp: int, is_decoder: bool) -> None:
    errors = t5_case(tp, is_decoder).errors()
    assert max(errors.values()) < 1e-3, errors


@pytest.mark.parametrize("tp", TP)
def test_bloom_alibi_attention_matches_huggingface(tp: int) -> None:
    errors = bloom_case(tp).errors()
    assert max(errors.values()) < 1e-3, errors


@pytest.mark.parametrize("tp", TP)
def test_bloom_block_matches_huggingface(tp: int) -> None:
    """Input norm, ALiBi attention, post-attention norm, GELU MLP, residuals before the norms
    (``apply_residual_connection_post_layernorm=False``): output, input and variable
    gradients."""
    errors = bloom_case(tp, block=True).errors()
    assert max(errors.values()) < 1e-3, errors


FLOAT16_CASES = {
    "bert": bert_case,
    "t5_encoder": lambda tp, dtype: t5_case(tp, False, dtype),
    "t5_decoder": lambda tp, dtype: t5_case(tp, True, dtype),
    "bloom": bloom_case,
    "bloom_block": lambda tp, dtype: bloom_case(tp, dtype, block=True),
}


@pytest.mark.parametrize("family", list(FLOAT16_CASES))
@pytest.mark.parametrize("tp", TP)
def test_families_float16(tp: int, family: str) -> None:
    """float16 weights and activations (softmax in float32, as the applications do) against
    HF in float32, to ``FLOAT16_RELATIVE_TOL`` (harness)."""
    assert_float16_close(FLOAT16_CASES[family](tp, popxl.float16))


def test_relative_position_buckets_reach_the_logarithmic_range() -> None:
    """At 200 positions distances pass ``max_exact`` and ``max_distance``: the buckets match
    HF's own function."""
    for bidirectional in (True, False):
        ours = relative_position_buckets(200, bidirectional)
        rel = torch.arange(200)[None, :] - torch.arange(200)[:, None]
        want = HFT5Attention._relative_position_bucket(rel, bidirectional, 32, 128).numpy()
        np.testing.assert_array_equal(ours, want)


def t5_block_case(tp: int, is_decoder: bool = True) -> Result:
    """HF ``T5Block``: a decoder's (self, cross to an encoder output, FF) or an encoder's
    (self, FF)."""
    cfg = TinyConfig(tensor_parallel=tp, eps=1e-6)
    torch.manual_seed(0)
    hf = HFT5Block(T5Config(d_model=cfg.hidden_size, d_kv=cfg.head_dim, num_heads=cfg.heads,
                            d_ff=cfg.ffn_size, relative_attention_num_buckets=32,
                            relative_attention_max_distance=128, dropout_rate=0.0,
                            layer_norm_epsilon=cfg.eps, feed_forward_proj="relu",
                            is_decoder=is_decoder),
                   has_relative_attention_bias=True).eval()
    _randomise(hf)
    seq = cfg.sequence_length
    mask = torch.triu(torch.full((1, 1, seq, seq), -1e4), 1) if is_decoder else None
    inputs = [_rows(cfg)]
    if is_decoder:
        inputs.append(np.random.default_rng(5).normal(size=inputs[0].shape).astype(np.float32))

    def forward(t: torch.Tensor, m: torch.Tensor | None = None) -> list[torch.Tensor]:
        memory = _bsh(cfg, m) if m is not None else None
        out = hf(_bsh(cfg, t), attention_mask=mask, encoder_hidden_states=memory)
        return [out[0].reshape(t.shape)]

    return compare(cfg, lambda: T5Block(cfg, is_decoder), T5Block.hf_mapping, hf, forward,
                   inputs)


@pytest.mark.parametrize("tp", TP)
def test_t5_decoder_block_matches_huggingface(tp: int) -> None:
    """Self-attention, cross-attention to an encoder output, feed-forward: the output and the
    gradients of both inputs and of every variable."""
    errors = t5_block_case(tp).errors()
    assert max(errors.values()) < 1e-3, errors


@pytest.mark.parametrize("tp", TP)
def test_t5_encoder_block_matches_huggingface(tp: int) -> None:
    """Bidirectional self-attention with relative buckets, feed-forward: the output and the
    gradients of the input and of every variable."""
    errors = t5_block_case(tp, is_decoder=False).errors()
    assert max(errors.values()) < 1e-3, errors


def test_t5_decoder_block_needs_memory() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(_rows(TinyConfig()), name="x")
        with pytest.raises(ValueError, match="T5Block.*memory"):
            T5Block(TinyConfig(), is_decoder=True).create_graph(x)
