"""BERT's encoder layer, T5's relative-position attention and Bloom's ALiBi attention,
application style, with their HuggingFace mappings."""

from __future__ import annotations

import math
from functools import partial

import numpy as np

import xlgraph as popxl
import xlgraph.addons as addons
from apps.harness import TinyConfig, sharded_grouping
from apps.layers import (
    CrossAttention,
    FeedForward,
    SelfAttention,
    np32,
    qkv_shards,
    shard_cols,
    shard_rows,
)
from xlgraph import ops
from xlgraph.addons import NamedTensors
from xlgraph.addons.layers import LayerNorm
from xlgraph.addons.utils import WeightsDict


def _linear_t(layer: object, dt: popxl.dtype) -> np.ndarray:
    """A torch ``nn.Linear`` weight as ``(in, out)``."""
    return np32(layer.weight, dt).T  # type: ignore[attr-defined]


class BertLayer(addons.Module):
    """Post-norm encoder layer: ``h = LN(x + attn(x))``, ``LN(h + ffn(h))`` (exact GELU)."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.config = config
        self.attention = SelfAttention(config, causal=False)
        self.attention_norm = LayerNorm()
        self.feed_forward = FeedForward(config, act="geluerf")
        self.output_norm = LayerNorm()

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        eps = self.config.eps
        h = self.attention_norm(x + self.attention(x), eps=eps)
        return self.output_norm(h + self.feed_forward(h), eps=eps)

    @staticmethod
    def hf_mapping(config: TinyConfig, variables: NamedTensors, hf: object) -> WeightsDict:
        """``transformers`` ``BertLayer``."""
        dt, n = config.dtype, config.tensor_parallel
        s, o = hf.attention.self, hf.attention.output
        return WeightsDict({
            variables.attention.qkv.weight: qkv_shards(
                _linear_t(s.query, dt), _linear_t(s.key, dt), _linear_t(s.value, dt), n),
            variables.attention.qkv.bias: qkv_shards(
                np32(s.query.bias, dt), np32(s.key.bias, dt), np32(s.value.bias, dt), n),
            variables.attention.output.weight: shard_rows(_linear_t(o.dense, dt), n),
            variables.attention.bias: np32(o.dense.bias, dt),
            variables.attention_norm.weight: np32(o.LayerNorm.weight, dt),
            variables.attention_norm.bias: np32(o.LayerNorm.bias, dt),
            variables.feed_forward.fc_in.weight: shard_cols(
                _linear_t(hf.intermediate.dense, dt), n),
            variables.feed_forward.fc_in.bias: shard_cols(np32(hf.intermediate.dense.bias, dt), n),
            variables.feed_forward.fc_out.weight: shard_rows(_linear_t(hf.output.dense, dt), n),
            variables.feed_forward.bias: np32(hf.output.dense.bias, dt),
            variables.output_norm.weight: np32(hf.output.LayerNorm.weight, dt),
            variables.output_norm.bias: np32(hf.output.LayerNorm.bias, dt),
        })


def relative_position_buckets(seq: int, bidirectional: bool, num_buckets: int = 32,
                              max_distance: int = 128) -> np.ndarray:
    """T5's bucket of every (query i, key j) pair, ``(seq, seq)`` int32: exact buckets for
    small distances, logarithmic ones up to ``max_distance``, split by sign when
    ``bidirectional``."""
    rel = np.arange(seq)[None, :] - np.arange(seq)[:, None]  # key - query
    buckets = np.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        buckets += (rel > 0) * num_buckets
        rel = np.abs(rel)
    else:
        rel = -np.minimum(rel, 0)
    exact = num_buckets // 2
    # float32 as HF computes it; the clamp only touches distance 0, an exact bucket
    log = np.log(np.maximum(rel, 1).astype(np.float32) / exact) / math.log(max_distance / exact)
    large = exact + (log * (num_buckets - exact)).astype(np.int64, copy=False)
    large = np.minimum(large, num_buckets - 1)
    return (buckets + np.where(rel < exact, rel, large)).astype(np.int32)


class T5SelfAttention(addons.Module):
    """T5 attention: no scaling, no biases, a learnt bias per (bucket, head) added to the
    scores; the table's heads are sharded like the attention heads. Decoders are causal and
    bucket one-sided distances."""

    def __init__(self, config: TinyConfig, is_decoder: bool = False, num_buckets: int = 32,
                 max_distance: int = 128) -> None:
        super().__init__()
        self.config = config
        self.is_decoder = is_decoder
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.attention = SelfAttention(config, qkv_bias=False, out_bias=False,
                                       causal=is_decoder, scale=False)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        cfg = self.config
        heads, seq = cfg.heads // cfg.tensor_parallel, cfg.sequence_length
        table = self.add_variable_input(
            "relative_attention_bias", partial(np.zeros, (self.num_buckets, heads)), x.dtype,
            replica_grouping=sharded_grouping(cfg))
        buckets = popxl.constant(relative_position_buckets(
            seq, not self.is_decoder, self.num_buckets, self.max_distance), popxl.int32)
        bias = ops.gather(table, buckets).transpose((2, 0, 1)).reshape((1, heads, seq, seq))
        return self.attention(x, bias)

    @staticmethod
    def hf_mapping(config: TinyConfig, variables: NamedTensors, hf: object) -> WeightsDict:
        """``transformers`` ``T5Attention`` (with its relative attention bias)."""
        dt, n = config.dtype, config.tensor_parallel
        return WeightsDict({
            variables.attention.qkv.weight: qkv_shards(
                _linear_t(hf.q, dt), _linear_t(hf.k, dt), _linear_t(hf.v, dt), n),
            variables.attention.output.weight: shard_rows(_linear_t(hf.o, dt), n),
            variables.relative_attention_bias: shard_cols(
                np32(hf.relative_attention_bias.weight, dt), n),
        })


class T5Norm(addons.Module):
    """T5's layer norm: ``w * x / sqrt(mean(x^2) + eps)`` (no centring, no bias), statistics
    in float32."""

    def build(self, x: popxl.Tensor, eps: float) -> popxl.Tensor:
        w = self.add_variable_input("weight", partial(np.ones, x.shape[-1]), x.dtype)
        x32 = ops.cast(x, popxl.float32)
        var = ops.mean(x32 * x32, axis=-1, keepdims=True)
        return ops.cast(x32 / ops.sqrt(var + eps), x.dtype) * w


class T5Block(addons.Module):
    """T5's block: self-attention with relative buckets (causal in a decoder), a decoder's
    cross-attention to the encoder's output, ReLU feed-forward without biases; each
    pre-normed (``T5Norm``) and added to its input."""

    def __init__(self, config: TinyConfig, is_decoder: bool = True) -> None:
        super().__init__()
        self.config = config
        self.is_decoder = is_decoder
        self.self_norm = T5Norm()
        self.self_attention = T5SelfAttention(config, is_decoder=is_decoder)
        if is_decoder:
            self.cross_norm = T5Norm()
            self.cross_attention = CrossAttention(config)
        self.ff_norm = T5Norm()
        self.feed_forward = FeedForward(config, act="relu", bias=False)

    def build(self, x: popxl.Tensor, memory: popxl.Tensor | None = None) -> popxl.Tensor:
        eps = self.config.eps
        x = x + self.self_attention(self.self_norm(x, eps))
        if self.is_decoder:
            if memory is None:
                raise ValueError("T5Block: a decoder block needs `memory` (the encoder's "
                                 "output); got None")
            x = x + self.cross_attention(self.cross_norm(x, eps), memory)
        return x + self.feed_forward(self.ff_norm(x, eps))

    @staticmethod
    def hf_mapping(config: TinyConfig, variables: NamedTensors, hf: object) -> WeightsDict:
        """``transformers`` ``T5Block`` of an encoder or a decoder (with the relative attention
        bias); the decoder's ``layer`` holds cross-attention between the two."""
        dt, n = config.dtype, config.tensor_parallel
        sa, ff = hf.layer[0], hf.layer[-1]
        v = variables
        out = WeightsDict({
            v.self_norm.weight: np32(sa.layer_norm.weight, dt),
            v.ff_norm.weight: np32(ff.layer_norm.weight, dt),
            v.feed_forward.fc_in.weight: shard_cols(_linear_t(ff.DenseReluDense.wi, dt), n),
            v.feed_forward.fc_out.weight: shard_rows(_linear_t(ff.DenseReluDense.wo, dt), n),
        })
        if len(hf.layer) == 3:
            ca = hf.layer[1]
            cross = ca.EncDecAttention
            out.update({
                v.cross_norm.weight: np32(ca.layer_norm.weight, dt),
                v.cross_attention.q.weight: shard_cols(_linear_t(cross.q, dt), n),
                v.cross_attention.kv.weight: np.concatenate(
                    [shard_cols(_linear_t(cross.k, dt), n),
                     shard_cols(_linear_t(cross.v, dt), n)], axis=-1),
                v.cross_attention.output.weight: shard_rows(_linear_t(cross.o, dt), n),
            })
        out.update(T5SelfAttention.hf_mapping(config, v.self_attention, sa.SelfAttention))
        return out


def alibi_slopes(heads: int) -> np.ndarray:
    """ALiBi's head slopes: a geometric series from ``2^(-8/p)`` for the largest power of two
    ``p <= heads``, the remaining heads taking odd powers of the series for ``2p``."""
    p = 2 ** math.floor(math.log2(heads))
    slopes = (2.0 ** (-8.0 / p)) ** np.arange(1, p + 1)
    if p != heads:
        extra = (2.0 ** (-4.0 / p)) ** np.arange(1, 1 + 2 * (heads - p), 2)
        slopes = np.concatenate([slopes, extra[:heads - p]])
    return slopes.astype(np.float32)


class BloomAttention(addons.Module):
    """Bloom's attention with its residual (``x`` unless ``residual`` is given): causal,
    scores plus ``slope_h * key_position`` (ALiBi). Each replica's slopes are those of its
    heads, so they are a (non-trained) variable sharded like the heads."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.config = config
        self.attention = SelfAttention(config)

    def build(self, x: popxl.Tensor, residual: popxl.Tensor | None = None) -> popxl.Tensor:
        cfg = self.config
        heads, seq = cfg.heads // cfg.tensor_parallel, cfg.sequence_length
        slopes = self.add_variable_input("alibi_slopes", partial(np.zeros, heads), popxl.float32,
                                         replica_grouping=sharded_grouping(cfg))
        positions = popxl.constant(np.arange(seq, dtype=np.float32).reshape(1, 1, 1, seq))
        bias = ops.detach(slopes).reshape((1, heads, 1, 1)) * positions
        return (x if residual is None else residual) + self.attention(x, bias)

    @staticmethod
    def hf_mapping(config: TinyConfig, variables: NamedTensors, hf: object) -> WeightsDict:
        """``transformers`` ``BloomAttention``: its fused ``query_key_value`` rows are
        ``[heads, (q, k, v), head_dim]``."""
        dt, n, d = config.dtype, config.tensor_parallel, config.head_dim
        w = _linear_t(hf.query_key_value, dt).reshape(config.hidden_size, config.heads, 3, d)
        b = np32(hf.query_key_value.bias, dt).reshape(config.heads, 3, d)
        qkv_w = [w[:, :, i].reshape(config.hidden_size, -1) for i in range(3)]
        qkv_b = [b[:, i].reshape(-1) for i in range(3)]
        return WeightsDict({
            variables.attention.qkv.weight: qkv_shards(*qkv_w, n),
            variables.attention.qkv.bias: qkv_shards(*qkv_b, n),
            variables.attention.output.weight: shard_rows(_linear_t(hf.dense, dt), n),
            variables.attention.bias: np32(hf.dense.bias, dt),
            variables.alibi_slopes: shard_cols(alibi_slopes(config.heads), n),
        })


class BloomBlock(addons.Module):
    """Bloom's block (residuals taken before the norms): ``h = x + attn(LN(x))``, then
    ``h + mlp(LN(h))`` with Bloom's tanh-approximated GELU."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.config = config
        self.input_layernorm = LayerNorm()
        self.self_attention = BloomAttention(config)
        self.post_attention_layernorm = LayerNorm()
        self.mlp = FeedForward(config, act="gelu")

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        eps = self.config.eps
        h = self.self_attention(self.input_layernorm(x, eps=eps), x)
        return h + self.mlp(self.post_attention_layernorm(h, eps=eps))

    @staticmethod
    def hf_mapping(config: TinyConfig, variables: NamedTensors, hf: object) -> WeightsDict:
        """``transformers`` ``BloomBlock``."""
        dt, n = config.dtype, config.tensor_parallel
        v, mlp = variables, hf.mlp
        out = WeightsDict({
            v.input_layernorm.weight: np32(hf.input_layernorm.weight, dt),
            v.input_layernorm.bias: np32(hf.input_layernorm.bias, dt),
            v.post_attention_layernorm.weight: np32(hf.post_attention_layernorm.weight, dt),
            v.post_attention_layernorm.bias: np32(hf.post_attention_layernorm.bias, dt),
            v.mlp.fc_in.weight: shard_cols(_linear_t(mlp.dense_h_to_4h, dt), n),
            v.mlp.fc_in.bias: shard_cols(np32(mlp.dense_h_to_4h.bias, dt), n),
            v.mlp.fc_out.weight: shard_rows(_linear_t(mlp.dense_4h_to_h, dt), n),
            v.mlp.bias: np32(mlp.dense_4h_to_h.bias, dt),
        })
        out.update(BloomAttention.hf_mapping(config, v.self_attention, hf.self_attention))
        return out
