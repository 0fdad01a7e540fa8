"""BERT pretraining (application style, tests/apps/bert.py: word embedding, masked-LM decoder
and sharded cross-entropy over 1, 2 and 4 tensor-parallel replicas, pooler and
next-sentence head) against ``transformers`` 4.25.1's ``BertForPreTraining``: the loss and
every variable's gradient to 3 decimals (and 1e-4 of each gradient's scale)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from apps.bert import BertPretrainingTP
from apps.harness import Result, TinyConfig, compare
from apps.lm import EmbeddingsTP
from xlgraph.addons.array_munging import tensor_parallel_input

transformers = pytest.importorskip("transformers")

from transformers import BertConfig, BertForPreTraining  # noqa: E402


def bert_pretraining_case(tp: int) -> Result:
    cfg = TinyConfig(tensor_parallel=tp, eps=1e-12)
    torch.manual_seed(0)
    hf = BertForPreTraining(BertConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, num_hidden_layers=1,
        num_attention_heads=cfg.heads, intermediate_size=cfg.ffn_size, hidden_act="gelu",
        max_position_embeddings=cfg.sequence_length, type_vocab_size=2,
        layer_norm_eps=cfg.eps, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        tie_word_embeddings=False)).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.copy_(torch.randn_like(p) * (0.2 if p.dim() > 1 else 0.5))
    b, seq = cfg.micro_batch_size, cfg.sequence_length
    rng = np.random.default_rng(3)
    ids = rng.integers(0, cfg.vocab_size, b * seq).astype(np.int32)
    types = (np.arange(b * seq) % seq >= seq // 2).astype(np.int32)
    positions = np.tile(np.arange(seq, dtype=np.int32), b)
    predict = rng.random(b * seq) < 0.4
    predict[0] = True
    mlm = np.where(predict, rng.integers(0, cfg.vocab_size, b * seq), 0).astype(np.int32)
    nsp = rng.integers(0, 2, b).astype(np.int32)
    offsets = EmbeddingsTP.offsets(cfg)

    def per_replica(a: np.ndarray) -> np.ndarray:
        return tensor_parallel_input(a[None], tp, tp, lambda t, i: t - offsets[i]).reshape(
            tp, *a.shape)

    def forward(words, pos, typ, labels, mask, nsp_labels) -> list[torch.Tensor]:
        hf_labels = torch.where(mask > 0, labels.long(), torch.tensor(-100))
        out = hf(input_ids=words.reshape(b, seq).long(),
                 token_type_ids=typ.reshape(b, seq).long(),
                 labels=hf_labels.reshape(b, seq), next_sentence_label=nsp_labels.long())
        return [out.loss]

    return compare(cfg, lambda: BertPretrainingTP(cfg), BertPretrainingTP.hf_mapping, hf,
                   forward, [ids, positions, types, mlm, predict.astype(np.float32), nsp],
                   grad_inputs=[False] * 6,
                   replica_inputs={0: per_replica(ids), 3: per_replica(mlm)})


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_bert_pretraining_matches_huggingface(tp: int) -> None:
    result = bert_pretraining_case(tp)
    errors = result.errors()
    assert max(errors.values()) < 1e-3, errors
    relative = result.errors(relative=True)
    assert max(relative.values()) < 1e-4, relative
    assert float(result.want_outputs[0]) > 1.0
