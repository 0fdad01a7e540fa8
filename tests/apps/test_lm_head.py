"""A one-layer GPT-2 language model with vocabulary-sharded embedding, LM head and sharded
cross-entropy (application style, tests/apps/lm.py) against ``transformers`` 4.25.1's
``GPT2LMHeadModel`` over 1, 2 and 4 tensor-parallel replicas: the loss and every variable's
gradient (each replica's vocabulary shard) to 3 decimals."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from apps.harness import Result, TinyConfig, compare
from apps.lm import EmbeddingsTP, GPTLMLossTP
from xlgraph.addons.array_munging import tensor_parallel_input

transformers = pytest.importorskip("transformers")

from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402


def lm_case(tp: int) -> Result:
    cfg = TinyConfig(tensor_parallel=tp)
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(
        n_embd=cfg.hidden_size, n_head=cfg.heads, n_layer=1, n_positions=cfg.sequence_length,
        vocab_size=cfg.vocab_size, n_inner=cfg.ffn_size, activation_function="gelu_new",
        layer_norm_epsilon=cfg.eps, resid_pdrop=0.0, attn_pdrop=0.0, embd_pdrop=0.0,
        tie_word_embeddings=False)).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.copy_(torch.randn_like(p) * (0.2 if p.dim() > 1 else 0.5))
    b, seq = cfg.micro_batch_size, cfg.sequence_length
    rng = np.random.default_rng(2)
    ids = rng.integers(0, cfg.vocab_size, (b, seq)).astype(np.int32)
    labels = np.concatenate([ids[:, 1:], ids[:, :1]], axis=1)  # next token; the last is masked
    positions = np.tile(np.arange(seq, dtype=np.int32), b)
    offsets = EmbeddingsTP.offsets(cfg)

    def per_replica(a: np.ndarray) -> np.ndarray:
        out = tensor_parallel_input(a[None], tp, tp, lambda t, i: t - offsets[i])
        return out.reshape(tp, *a.shape)

    def forward(words: torch.Tensor, pos: torch.Tensor, lab: torch.Tensor) -> list[torch.Tensor]:
        return [hf(words.reshape(b, seq).long(), labels=words.reshape(b, seq).long()).loss]

    return compare(cfg, lambda: GPTLMLossTP(cfg), GPTLMLossTP.hf_mapping, hf, forward,
                   [ids.reshape(-1), positions, labels.reshape(-1)],
                   replica_inputs={0: per_replica(ids.reshape(-1)),
                                   2: per_replica(labels.reshape(-1))})


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_gpt2_lm_with_sharded_cross_entropy_matches_huggingface(tp: int) -> None:
    result = lm_case(tp)
    errors = result.errors()
    assert max(errors.values()) < 1e-3, errors
    # the mean loss makes gradients small (~1e-2): hold them to their scale too
    relative = result.errors(relative=True)
    assert max(relative.values()) < 1e-4, relative
    assert float(result.want_outputs[0]) > 1.0  # a real loss, not a degenerate one
