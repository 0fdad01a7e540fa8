"""GPT-2 decoding one token per sequence with a KV cache, as the applications' inference
scripts do: each layer keeps its keys and values in by-reference variables updated in place
at the current position (``dynamic_update_``), and the query attends to the cache up to it."""

from __future__ import annotations

from functools import partial

import numpy as np

import xlgraph as popxl
import xlgraph.addons as addons
from apps.gpt import GPT2Block
from apps.harness import TinyConfig, tp_group
from apps.layers import MASKED, SelfAttention, np32, shard_cols
from xlgraph import ops
from xlgraph.addons import NamedTensors
from xlgraph.addons.array_munging import pad_axis
from xlgraph.addons.layers import Embedding, LayerNorm, Linear
from xlgraph.addons.ops.replicated_all_reduce_TP import replicated_all_reduce_identical_inputs
from xlgraph.addons.utils import WeightsDict


class CachedSelfAttention(SelfAttention):
    """Causal self-attention of one new token per sequence: its key and value are written
    into ``k_cache`` / ``v_cache`` ``(batch, seq, heads, head_dim)`` at ``position``; positions
    after it are masked."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__(config, causal=False)

    def build(self, x: popxl.Tensor, position: popxl.Tensor,  # type: ignore[override]
              ) -> popxl.Tensor:
        cfg = self.config
        x = replicated_all_reduce_identical_inputs(x, group=tp_group(cfg))
        q, k, v = (self.split_heads(t) for t in ops.split(self.qkv(x), 3, axis=-1))
        shape = (cfg.micro_batch_size, cfg.sequence_length, self.heads, cfg.head_dim)
        caches = [self.add_variable_input(name, partial(np.zeros, shape), x.dtype, by_ref=True,
                                          replica_grouping=self.rg)
                  for name in ("k_cache", "v_cache")]
        k, v = (ops.dynamic_update_(c, position, t, axes=[1], sizes=[1])
                for c, t in zip(caches, (k, v)))
        later = ops.greater(popxl.constant(np.arange(cfg.sequence_length, dtype=np.int32)),
                            position)
        mask = (ops.cast(later, popxl.float32) * MASKED).reshape((1, 1, 1, -1))
        return self.attend(q, k, v, mask)


class GPT2DecodeBlock(GPT2Block):
    """``GPT2Block`` (same variable names) with the cached attention."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__(config)
        self.attention = CachedSelfAttention(config)

    def build(self, x: popxl.Tensor, position: popxl.Tensor,  # type: ignore[override]
              ) -> popxl.Tensor:
        h = x + self.attention(self.ln_1(x, eps=self.config.eps), position)
        return h + self.feed_forward(self.ln_2(h, eps=self.config.eps))


class GPT2DecodeStep(addons.Module):
    """Next-token logits ``(batch, vocab)`` of ``words`` ``(batch,)`` at ``position``."""

    def __init__(self, config: TinyConfig, layers: int) -> None:
        super().__init__()
        self.config = config
        self.word = Embedding(config.dtype, config.vocab_size, config.hidden_size)
        self.positional = Embedding(config.dtype, config.sequence_length, config.hidden_size)
        self.layers = addons.Module.from_list([GPT2DecodeBlock(config) for _ in range(layers)])
        self.ln_f = LayerNorm()
        self.head = Linear(config.vocab_size, bias=False)

    def build(self, words: popxl.Tensor, position: popxl.Tensor) -> popxl.Tensor:
        x = self.word(words) + self.positional(position.reshape((1,)))
        for layer in self.layers:
            x = layer(x, position)
        return self.head(self.ln_f(x, eps=self.config.eps))

    @staticmethod
    def hf_mapping(config: TinyConfig, variables: NamedTensors, hf: object) -> WeightsDict:
        """``transformers`` ``GPT2LMHeadModel`` (caches are not mapped: they start at zero)."""
        dt, t = config.dtype, hf.transformer
        rows = variables.positional.weight.shape[0]
        out = WeightsDict({
            variables.word.weight: np32(t.wte.weight, dt),
            variables.positional.weight: pad_axis(np32(t.wpe.weight, dt), rows, 0),
            variables.ln_f.weight: np32(t.ln_f.weight, dt),
            variables.ln_f.bias: np32(t.ln_f.bias, dt),
            variables.head.weight: shard_cols(np32(hf.lm_head.weight, dt).T, 1),
        })
        for i, block in enumerate(t.h):
            out.update(GPT2Block.hf_mapping(config, variables.layers.get(str(i)), block))
        return out
