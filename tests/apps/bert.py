"""BERT pretraining, application style: embeddings with the word table sharded over the
tensor-parallel replicas, encoder layers (``families.BertLayer``), the pooler, and the
pretraining heads (masked-LM over this replica's vocabulary columns with the sharded
cross-entropy; next-sentence prediction), with the HuggingFace mapping."""

from __future__ import annotations

import numpy as np

import xlgraph as popxl
import xlgraph.addons as addons
from apps.families import BertLayer
from apps.harness import TinyConfig, sharded_grouping, tp_group
from apps.layers import np32, shard, shard_cols
from xlgraph import ops
from xlgraph.addons import NamedTensors
from xlgraph.addons.array_munging import pad_axis
from xlgraph.addons.layers import Embedding, LayerNorm, Linear
from xlgraph.addons.ops.cross_entropy import cross_entropy
from xlgraph.addons.ops.cross_entropy_sharded_loss import cross_entropy_sharded_loss
from xlgraph.addons.ops.replicated_all_reduce_TP import (
    replicated_all_reduce_identical_grad_inputs,
    replicated_all_reduce_identical_inputs,
)
from xlgraph.addons.utils import WeightsDict

TYPES = 2  # token types (sentence A / B)


class BertEmbeddingsTP(addons.Module):
    """``LN(word + position + token type)``; word rows sharded (indices pre-offset)."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.config = config
        self.word = Embedding(config.dtype, config.vocab_size, config.hidden_size,
                              replica_grouping=sharded_grouping(config))
        self.position = Embedding(config.dtype, config.sequence_length, config.hidden_size)
        self.token_type = Embedding(config.dtype, TYPES, config.hidden_size)
        self.norm = LayerNorm()

    def build(self, words: popxl.Tensor, positions: popxl.Tensor, types: popxl.Tensor,
              ) -> popxl.Tensor:
        x = replicated_all_reduce_identical_grad_inputs(self.word(words),
                                                        group=tp_group(self.config))
        x = x + self.position(positions) + self.token_type(types)
        return self.norm(x, eps=self.config.eps)


class BertPretrainingTP(addons.Module):
    """Embeddings, one encoder layer, then the masked-LM loss (mean over tokens with
    ``mlm_mask`` 1, sharded cross-entropy) plus the next-sentence loss."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        cfg = self.config = config
        self.embeddings = BertEmbeddingsTP(config)
        self.layer = BertLayer(config)
        self.pooler = Linear(cfg.hidden_size)
        self.transform = Linear(cfg.hidden_size)
        self.transform_norm = LayerNorm()
        self.decoder = Linear(cfg.vocab_size // cfg.tensor_parallel,
                              replica_grouping=sharded_grouping(cfg))
        self.seq_relationship = Linear(2)

    def build(self, words: popxl.Tensor, positions: popxl.Tensor, types: popxl.Tensor,
              mlm_labels: popxl.Tensor, mlm_mask: popxl.Tensor, nsp_labels: popxl.Tensor,
              ) -> popxl.Tensor:
        cfg = self.config
        x = self.layer(self.embeddings(words, positions, types))
        first = x.reshape((cfg.micro_batch_size, cfg.sequence_length, cfg.hidden_size))[:, 0]
        nsp = cross_entropy(self.seq_relationship(ops.tanh(self.pooler(first))), nsp_labels)
        h = self.transform_norm(ops.geluerf(self.transform(x)), eps=cfg.eps)
        logits = self.decoder(replicated_all_reduce_identical_inputs(h, group=tp_group(cfg)))
        per_token = cross_entropy_sharded_loss(logits, mlm_labels, reduction="none",
                                               replica_grouping=tp_group(cfg))
        mlm = ops.sum(per_token * mlm_mask) / ops.sum(mlm_mask)
        return mlm + nsp

    @staticmethod
    def hf_mapping(config: TinyConfig, variables: NamedTensors, hf: object) -> WeightsDict:
        """``transformers`` ``BertForPreTraining`` (one layer, untied decoder)."""
        dt, n = config.dtype, config.tensor_parallel
        e, p = hf.bert.embeddings, hf.cls.predictions

        def linear(var: NamedTensors, layer: object) -> dict:
            return {var.weight: np32(layer.weight, dt).T, var.bias: np32(layer.bias, dt)}

        def padded(var: popxl.Tensor, table: object) -> np.ndarray:
            return pad_axis(np32(table.weight, dt), var.shape[0], 0)

        v = variables
        out = WeightsDict({
            v.embeddings.word.weight: shard(np32(e.word_embeddings.weight, dt), n, 0),
            v.embeddings.position.weight: padded(v.embeddings.position.weight,
                                                 e.position_embeddings),
            v.embeddings.token_type.weight: padded(v.embeddings.token_type.weight,
                                                   e.token_type_embeddings),
            v.embeddings.norm.weight: np32(e.LayerNorm.weight, dt),
            v.embeddings.norm.bias: np32(e.LayerNorm.bias, dt),
            **linear(v.pooler, hf.bert.pooler.dense),
            **linear(v.transform, p.transform.dense),
            v.transform_norm.weight: np32(p.transform.LayerNorm.weight, dt),
            v.transform_norm.bias: np32(p.transform.LayerNorm.bias, dt),
            v.decoder.weight: shard_cols(np32(p.decoder.weight, dt).T, n),
            v.decoder.bias: shard_cols(np32(p.bias, dt), n),
            **linear(v.seq_relationship, hf.cls.seq_relationship),
        })
        out.update(BertLayer.hf_mapping(config, v.layer, hf.bert.encoder.layer[0]))
        return out
