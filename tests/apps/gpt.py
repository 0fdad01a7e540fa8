"""GPT-2/GPT-3 and GPT-J decoder blocks, application style, with their HuggingFace mappings."""

from __future__ import annotations

import numpy as np

import xlgraph as popxl
import xlgraph.addons as addons
from apps.harness import TinyConfig
from apps.layers import FeedForward, SelfAttention, np32, qkv_shards, shard_cols, shard_rows
from xlgraph.addons import NamedTensors
from xlgraph.addons.layers import LayerNorm
from xlgraph.addons.utils import WeightsDict


class GPT2Block(addons.Module):
    """``x + attn(ln_1(x))``, then ``h + mlp(ln_2(h))`` (GPT-2, GPT-3): causal attention."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.config = config
        self.ln_1 = LayerNorm()
        self.attention = SelfAttention(config)
        self.ln_2 = LayerNorm()
        self.feed_forward = FeedForward(config)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        h = x + self.attention(self.ln_1(x, eps=self.config.eps))
        return h + self.feed_forward(self.ln_2(h, eps=self.config.eps))

    @staticmethod
    def hf_mapping(config: TinyConfig, variables: NamedTensors, hf: object) -> WeightsDict:
        """``transformers`` ``GPT2Block`` (Conv1D weights are already ``(in, out)``)."""
        dt, n = config.dtype, config.tensor_parallel
        w = np32(hf.attn.c_attn.weight, dt)
        b = np32(hf.attn.c_attn.bias, dt)
        return WeightsDict({
            variables.ln_1.weight: np32(hf.ln_1.weight, dt),
            variables.ln_1.bias: np32(hf.ln_1.bias, dt),
            variables.ln_2.weight: np32(hf.ln_2.weight, dt),
            variables.ln_2.bias: np32(hf.ln_2.bias, dt),
            variables.attention.qkv.weight: qkv_shards(*np.split(w, 3, axis=1), n),
            variables.attention.qkv.bias: qkv_shards(*np.split(b, 3), n),
            variables.attention.output.weight: shard_rows(np32(hf.attn.c_proj.weight, dt), n),
            variables.attention.bias: np32(hf.attn.c_proj.bias, dt),
            variables.feed_forward.fc_in.weight: shard_cols(np32(hf.mlp.c_fc.weight, dt), n),
            variables.feed_forward.fc_in.bias: shard_cols(np32(hf.mlp.c_fc.bias, dt), n),
            variables.feed_forward.fc_out.weight: shard_rows(np32(hf.mlp.c_proj.weight, dt), n),
            variables.feed_forward.bias: np32(hf.mlp.c_proj.bias, dt),
        })


class GPTJBlock(addons.Module):
    """``x + attn(ln_1(x)) + mlp(ln_1(x))`` (GPT-J): parallel attention and feed-forward,
    rotary embedding on the first ``rotary_dim`` features of each head, no qkv bias."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.config = config
        self.ln_1 = LayerNorm()
        self.attention = SelfAttention(config, qkv_bias=False, out_bias=False,
                                       rotary_dim=config.rotary_dim)
        self.feed_forward = FeedForward(config)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        h = self.ln_1(x, eps=self.config.eps)
        return x + self.attention(h) + self.feed_forward(h)

    @staticmethod
    def hf_mapping(config: TinyConfig, variables: NamedTensors, hf: object) -> WeightsDict:
        """``transformers`` ``GPTJBlock`` (``nn.Linear`` weights are ``(out, in)``)."""
        dt, n = config.dtype, config.tensor_parallel
        a, m = hf.attn, hf.mlp
        return WeightsDict({
            variables.ln_1.weight: np32(hf.ln_1.weight, dt),
            variables.ln_1.bias: np32(hf.ln_1.bias, dt),
            variables.attention.qkv.weight: qkv_shards(
                np32(a.q_proj.weight, dt).T, np32(a.k_proj.weight, dt).T,
                np32(a.v_proj.weight, dt).T, n),
            variables.attention.output.weight: shard_rows(np32(a.out_proj.weight, dt).T, n),
            variables.feed_forward.fc_in.weight: shard_cols(np32(m.fc_in.weight, dt).T, n),
            variables.feed_forward.fc_in.bias: shard_cols(np32(m.fc_in.bias, dt), n),
            variables.feed_forward.fc_out.weight: shard_rows(np32(m.fc_out.weight, dt).T, n),
            variables.feed_forward.bias: np32(m.fc_out.bias, dt),
        })
