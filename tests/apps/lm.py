"""A one-layer GPT-2 language model with the vocabulary sharded over the tensor-parallel
replicas (word embedding rows, LM-head columns) and the sharded cross-entropy, application
style, with its HuggingFace mapping."""

from __future__ import annotations

import numpy as np

import xlgraph as popxl
import xlgraph.addons as addons
from apps.gpt import GPT2Block
from apps.harness import TinyConfig, sharded_grouping, tp_group
from apps.layers import np32, shard, shard_cols
from xlgraph import ops
from xlgraph.addons import NamedTensors
from xlgraph.addons.array_munging import pad_axis
from xlgraph.addons.layers import Embedding, LayerNorm, Linear
from xlgraph.addons.ops.cross_entropy_sharded_loss import cross_entropy_sharded_loss
from xlgraph.addons.ops.replicated_all_reduce_TP import (
    replicated_all_reduce_identical_grad_inputs,
    replicated_all_reduce_identical_inputs,
)
from xlgraph.addons.utils import WeightsDict


class EmbeddingsTP(addons.Module):
    """Word rows sharded over the replicas (indices pre-offset per replica; rows outside the
    shard are zero, so an all-reduce sums the lookups) plus replicated positions."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.config = config
        self.word = Embedding(config.dtype, config.vocab_size, config.hidden_size,
                              replica_grouping=sharded_grouping(config))
        self.positional = Embedding(config.dtype, config.sequence_length, config.hidden_size)

    def build(self, words: popxl.Tensor, positions: popxl.Tensor) -> popxl.Tensor:
        x = replicated_all_reduce_identical_grad_inputs(self.word(words),
                                                        group=tp_group(self.config))
        return x + self.positional(positions)

    @staticmethod
    def offsets(config: TinyConfig) -> np.ndarray:
        """The first vocabulary row of every replica's shard."""
        return Embedding.get_offsets(config.vocab_size, config.tensor_parallel)


class GPTLMLossTP(addons.Module):
    """Embeddings, one GPT-2 block, the final norm, logits of this replica's vocabulary
    columns and the mean sharded cross-entropy over the tokens with ``mask`` 1."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = EmbeddingsTP(config)
        self.layer = GPT2Block(config)
        self.ln_f = LayerNorm()
        self.head = Linear(config.vocab_size // config.tensor_parallel, bias=False,
                           replica_grouping=sharded_grouping(config))

    def build(self, words: popxl.Tensor, positions: popxl.Tensor, labels: popxl.Tensor,
              ) -> popxl.Tensor:
        cfg = self.config
        x = self.layer(self.embeddings(words, positions))
        h = replicated_all_reduce_identical_inputs(self.ln_f(x, eps=cfg.eps), group=tp_group(cfg))
        logits = self.head(h)
        seq = cfg.sequence_length
        mask = np.tile(np.arange(seq) < seq - 1, cfg.micro_batch_size).astype(np.float32)
        per_token = cross_entropy_sharded_loss(logits, labels, replica_grouping=tp_group(cfg),
                                               reduction="none")
        masked = per_token * popxl.constant(mask, per_token.dtype)
        return ops.sum(masked) / float(mask.sum())

    @staticmethod
    def hf_mapping(config: TinyConfig, variables: NamedTensors, hf: object) -> WeightsDict:
        """``transformers`` ``GPT2LMHeadModel`` with one layer and untied head weights."""
        dt, n = config.dtype, config.tensor_parallel
        t = hf.transformer
        rows = variables.embeddings.positional.weight.shape[0]
        out = WeightsDict({
            variables.embeddings.word.weight: shard(np32(t.wte.weight, dt), n, 0),
            variables.embeddings.positional.weight: pad_axis(np32(t.wpe.weight, dt), rows, 0),
            variables.ln_f.weight: np32(t.ln_f.weight, dt),
            variables.ln_f.bias: np32(t.ln_f.bias, dt),
            variables.head.weight: shard_cols(np32(hf.lm_head.weight, dt).T, n),
        })
        out.update(GPT2Block.hf_mapping(config, variables.layer, t.h[0]))
        return out
