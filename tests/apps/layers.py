"""Tensor-parallel transformer pieces written as the PopXL applications write them: addons
``Module``s whose variables are sharded over the tensor-parallel replicas (heads, MLP columns),
a block opened by ``replicated_all_reduce_identical_inputs`` and closed by
``replicated_all_reduce_identical_grad_inputs``, activations as 2-D ``(batch * seq, hidden)``."""

from __future__ import annotations

import math
from functools import partial

import numpy as np

import xlgraph as popxl
import xlgraph.addons as addons
from apps.harness import TinyConfig, sharded_grouping, tp_group
from xlgraph import ops
from xlgraph.addons.layers import Linear
from xlgraph.addons.ops.replicated_all_reduce_TP import (
    replicated_all_reduce_identical_grad_inputs,
    replicated_all_reduce_identical_inputs,
)
from xlgraph.addons.ops.rotary_pos_embed import rotary_pos_embed, trig_table_constants

MASKED = -1e4  # added to masked scores: exp underflows to 0 in float16 and float32


def causal_mask(seq: int, dtype: popxl.dtype) -> popxl.Tensor:
    """``(seq, seq)``: 0 on and below the diagonal, ``MASKED`` above."""
    return popxl.constant(np.triu(np.full((seq, seq), MASKED), 1), dtype, name="causal_mask")


def replicated_bias(module: addons.Module, size: int, dtype: popxl.dtype) -> popxl.Tensor:
    """A bias every replica holds whole (added after the closing all-reduce)."""
    return module.add_variable_input("bias", partial(np.zeros, size), dtype)


class HeadsAttention(addons.Module):
    """What every attention here shares: this replica's heads attend, ``output`` projects
    their rows, the all-reduce closes the tensor-parallel block, then the replicated bias.

    Scores are scaled by ``1/sqrt(head_dim)`` when ``scale``, given a ``position_bias`` (T5,
    ALiBi), masked when ``causal``; softmax in float32.
    """

    def __init__(self, config: TinyConfig, out_bias: bool = True, causal: bool = True,
                 scale: bool = True) -> None:
        super().__init__()
        self.config = config
        self.rg = sharded_grouping(config)
        self.heads = config.heads // config.tensor_parallel
        self.width = self.heads * config.head_dim
        self.causal, self.scale, self.out_bias = causal, scale, out_bias
        self.output = Linear(config.hidden_size, bias=False, replica_grouping=self.rg)

    def split_heads(self, t: popxl.Tensor) -> popxl.Tensor:
        """``(batch * seq, width)`` to ``(batch, seq, heads, head_dim)``."""
        cfg = self.config
        return t.reshape((cfg.micro_batch_size, -1, self.heads, cfg.head_dim))

    def attend(self, q: popxl.Tensor, k: popxl.Tensor, v: popxl.Tensor,
               position_bias: popxl.Tensor | None) -> popxl.Tensor:
        """``(batch, seq, heads, head_dim)`` queries, keys, values to the block's output."""
        cfg = self.config
        dtype = q.dtype
        q = q.transpose((0, 2, 1, 3))
        k = k.transpose((0, 2, 3, 1))
        v = v.transpose((0, 2, 1, 3))
        w = ops.cast(q @ k, popxl.float32)
        if self.scale:
            w = w * (1 / math.sqrt(cfg.head_dim))
        if position_bias is not None:
            w = w + ops.cast(position_bias, popxl.float32)
        if self.causal:
            w = w + causal_mask(cfg.sequence_length, popxl.float32)
        p = ops.cast(ops.softmax(w, axis=-1), dtype)
        z = (p @ v).transpose((0, 2, 1, 3)).reshape((-1, self.width))
        z = replicated_all_reduce_identical_grad_inputs(self.output(z), group=tp_group(cfg))
        if self.out_bias:
            z = z + replicated_bias(self, cfg.hidden_size, dtype)
        return z


class SelfAttention(HeadsAttention):
    """Multi-head self-attention with the heads split over the tensor-parallel replicas;
    ``qkv`` holds ``[q | k | v]`` of this replica's heads; ``rotary_dim`` features of queries
    and keys are rotated (GPT-J)."""

    def __init__(self, config: TinyConfig, qkv_bias: bool = True, out_bias: bool = True,
                 causal: bool = True, scale: bool = True, rotary_dim: int = 0) -> None:
        super().__init__(config, out_bias, causal, scale)
        self.rotary_dim = rotary_dim
        self.qkv = Linear(3 * self.width, bias=qkv_bias, replica_grouping=self.rg)

    def build(self, x: popxl.Tensor, position_bias: popxl.Tensor | None = None,
              ) -> popxl.Tensor:
        x = replicated_all_reduce_identical_inputs(x, group=tp_group(self.config))
        q, k, v = (self.split_heads(t) for t in ops.split(self.qkv(x), 3, axis=-1))
        if self.rotary_dim:
            sin, cos = trig_table_constants(self.config.sequence_length, self.rotary_dim,
                                            dtype=x.dtype)
            q = rotary_pos_embed(q, sin, cos, self.rotary_dim)
            k = rotary_pos_embed(k, sin, cos, self.rotary_dim)
        return self.attend(q, k, v, position_bias)


class CrossAttention(HeadsAttention):
    """Queries from ``x``, keys and values (``kv`` = ``[k | v]`` of this replica's heads)
    from ``memory`` (an encoder's output)."""

    def __init__(self, config: TinyConfig, bias: bool = False, scale: bool = False) -> None:
        super().__init__(config, out_bias=bias, causal=False, scale=scale)
        self.q = Linear(self.width, bias=bias, replica_grouping=self.rg)
        self.kv = Linear(2 * self.width, bias=bias, replica_grouping=self.rg)

    def build(self, x: popxl.Tensor, memory: popxl.Tensor) -> popxl.Tensor:
        group = tp_group(self.config)
        x = replicated_all_reduce_identical_inputs(x, group=group)
        memory = replicated_all_reduce_identical_inputs(memory, group=group)
        k, v = (self.split_heads(t) for t in ops.split(self.kv(memory), 2, axis=-1))
        return self.attend(self.split_heads(self.q(x)), k, v, None)


class FeedForward(addons.Module):
    """``fc_out(act(fc_in(x)))`` with ``fc_in``'s columns and ``fc_out``'s rows split over the
    tensor-parallel replicas; ``fc_out``'s bias is added once, after the all-reduce."""

    def __init__(self, config: TinyConfig, act: str = "gelu", bias: bool = True) -> None:
        super().__init__()
        self.config = config
        self.act = getattr(ops, act)
        self.has_bias = bias
        rg = sharded_grouping(config)
        self.fc_in = Linear(config.ffn_size // config.tensor_parallel, bias=bias,
                            replica_grouping=rg)
        self.fc_out = Linear(config.hidden_size, bias=False, replica_grouping=rg)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        cfg = self.config
        x = replicated_all_reduce_identical_inputs(x, group=tp_group(cfg))
        z = self.fc_out(self.act(self.fc_in(x)))
        z = replicated_all_reduce_identical_grad_inputs(z, group=tp_group(cfg))
        return z + replicated_bias(self, cfg.hidden_size, x.dtype) if self.has_bias else z


# --- HuggingFace weight mapping helpers (numpy, host side) ---

def shard(w: np.ndarray, n: int, axis: int) -> np.ndarray:
    """``array_munging.shard`` (shards on a new leading axis), without that axis for one shard:
    a variable of one replica group holds its plain shape on the host."""
    out = addons.array_munging.shard(w, n, axis)
    return out[0] if n == 1 else out


def shard_cols(w: np.ndarray, n: int) -> np.ndarray:
    """``(in, out)`` split by output columns: ``(n, in, out / n)`` (a bias: ``(n, out / n)``)."""
    return shard(w, n, -1)


def shard_rows(w: np.ndarray, n: int) -> np.ndarray:
    """``(in, out)`` split by input rows: ``(n, in / n, out)``."""
    return shard(w, n, 0)


def qkv_shards(q: np.ndarray, k: np.ndarray, v: np.ndarray, n: int) -> np.ndarray:
    """``[q | k | v]`` of each replica's heads: each ``(in, H)`` (or bias ``(H,)``) is split
    by heads (columns) and the three parts of one replica are joined."""
    return np.concatenate([shard_cols(t, n) for t in (q, k, v)], axis=-1)


def np32(t: object, dtype: popxl.dtype) -> np.ndarray:
    """A torch parameter as a host array of ``dtype``."""
    return t.detach().numpy().astype(dtype.as_numpy())  # type: ignore[attr-defined]
