"""A small GPT written as Graphcore's PopXL applications write their models: addons
``Module``s whose variables are named by the module tree, activations as 2-D
``(batch * sequence, hidden)``. ``GPTLoss`` is the training graph; ``GPTDecodeStep`` decodes
one token with a KV cache (variables updated in place by ``dynamic_update_``) and uses the
same variable names, so a training checkpoint loads into it."""

from __future__ import annotations

import math
from functools import partial

import numpy as np
from config import GPTConfig

import xlgraph as popxl
import xlgraph.addons as addons
from xlgraph import ops
from xlgraph.addons.layers import Embedding, LayerNorm, Linear
from xlgraph.addons.ops.cross_entropy import cross_entropy

MASKED = -1e4  # added to the scores of positions a query may not see


def _heads(t: popxl.Tensor, batch: int, seq: int, cfg: GPTConfig) -> popxl.Tensor:
    """``(batch * seq, hidden)`` to ``(batch, heads, seq, head_dim)``."""
    return t.reshape((batch, seq, cfg.heads, cfg.head_dim)).transpose((0, 2, 1, 3))


def _attend(q: popxl.Tensor, k: popxl.Tensor, v: popxl.Tensor, mask: popxl.Tensor,
            cfg: GPTConfig) -> popxl.Tensor:
    """Softmax attention of ``(b, h, sq, d)`` queries over ``(b, h, sk, d)`` keys/values."""
    w = (q @ k.transpose((0, 1, 3, 2))) * (1 / math.sqrt(cfg.head_dim)) + mask
    z = ops.softmax(w, axis=-1) @ v
    b, _, sq, _ = z.shape
    return z.transpose((0, 2, 1, 3)).reshape((b * sq, cfg.hidden_size))


class Attention(addons.Module):
    """Causal self-attention over a whole sequence (training)."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.qkv = Linear(3 * cfg.hidden_size)
        self.output = Linear(cfg.hidden_size)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        cfg = self.cfg
        b, s = x.shape[0] // cfg.sequence_length, cfg.sequence_length
        q, k, v = (_heads(t, b, s, cfg) for t in ops.split(self.qkv(x), 3, axis=-1))
        mask = popxl.constant(np.triu(np.full((s, s), MASKED, np.float32), 1))
        return self.output(_attend(q, k, v, mask, cfg))


class CachedAttention(Attention):
    """One new token per sequence: its key and value go into the caches at ``position``,
    and the query attends to the cache up to ``position``."""

    def build(self, x: popxl.Tensor,  # type: ignore[override]
              position: popxl.Tensor) -> popxl.Tensor:
        cfg = self.cfg
        b, s = x.shape[0], cfg.sequence_length
        shape = (b, cfg.heads, s, cfg.head_dim)
        k_cache = self.add_variable_input("k_cache", partial(np.zeros, shape), x.dtype,
                                          by_ref=True)
        v_cache = self.add_variable_input("v_cache", partial(np.zeros, shape), x.dtype,
                                          by_ref=True)
        q, k, v = (_heads(t, b, 1, cfg) for t in ops.split(self.qkv(x), 3, axis=-1))
        k_cache = ops.dynamic_update_(k_cache, position, k, axes=[2], sizes=[1])
        v_cache = ops.dynamic_update_(v_cache, position, v, axes=[2], sizes=[1])
        seen = ops.greater(popxl.constant(np.arange(s, dtype=np.int32)), position)
        mask = ops.cast(seen, x.dtype) * MASKED
        return self.output(_attend(q, k_cache, v_cache, mask, cfg))


class Block(addons.Module):
    """Pre-norm decoder block: ``x + attn(ln_1(x))``, then ``h + mlp(ln_2(h))``."""

    def __init__(self, cfg: GPTConfig, cached: bool = False) -> None:
        super().__init__()
        self.ln_1 = LayerNorm()
        self.attention = CachedAttention(cfg) if cached else Attention(cfg)
        self.ln_2 = LayerNorm()
        self.fc_in = Linear(4 * cfg.hidden_size)
        self.fc_out = Linear(cfg.hidden_size)

    def build(self, x: popxl.Tensor, *position: popxl.Tensor) -> popxl.Tensor:
        h = x + self.attention(self.ln_1(x), *position)
        return h + self.fc_out(ops.gelu(self.fc_in(self.ln_2(h))))


class _GPT(addons.Module):
    """Embeddings, the blocks (``layer0``, ``layer1``, ...), the final norm and the head."""

    def __init__(self, cfg: GPTConfig, cached: bool = False) -> None:
        super().__init__()
        self.cfg = cfg
        self.word = Embedding(popxl.float32, cfg.vocab_size, cfg.hidden_size)
        self.positional = Embedding(popxl.float32, cfg.sequence_length, cfg.hidden_size)
        for i in range(cfg.layers):
            setattr(self, f"layer{i}", Block(cfg, cached))
        self.ln_f = LayerNorm()
        self.head = Linear(cfg.vocab_size, bias=False)

    def logits(self, words: popxl.Tensor, positions: popxl.Tensor,
               *position: popxl.Tensor) -> popxl.Tensor:
        x = self.word(words) + self.positional(positions)
        for i in range(self.cfg.layers):
            x = getattr(self, f"layer{i}")(x, *position)
        return self.head(self.ln_f(x))


class GPTLoss(_GPT):
    """Mean next-token cross-entropy of ``(batch * seq,)`` words against ``labels``."""

    def build(self, words: popxl.Tensor, positions: popxl.Tensor,
              labels: popxl.Tensor) -> popxl.Tensor:
        return cross_entropy(self.logits(words, positions), labels)


class GPTLogits(_GPT):
    """Next-token logits ``(batch * seq, vocab)`` of a whole sequence (no cache)."""

    def build(self, words: popxl.Tensor, positions: popxl.Tensor) -> popxl.Tensor:
        return self.logits(words, positions)


class GPTDecodeStep(_GPT):
    """Logits for the next token after ``words`` (one per sequence) at ``position``."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__(cfg, cached=True)

    def build(self, words: popxl.Tensor,  # type: ignore[override]
              position: popxl.Tensor) -> popxl.Tensor:
        return self.logits(words, position.reshape((1,)), position)
