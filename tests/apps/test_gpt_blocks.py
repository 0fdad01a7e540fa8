"""GPT-2/GPT-3 and GPT-J decoder blocks (application style, tests/apps/gpt.py) against
``transformers`` 4.25.1 at the tiny config, over 1, 2 and 4 tensor-parallel replicas: outputs,
input gradients and every variable's gradient (per replica shard) to 3 decimals."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import xlgraph as popxl
from apps.gpt import GPT2Block, GPTJBlock
from apps.harness import Result, TinyConfig, assert_float16_close, compare

transformers = pytest.importorskip("transformers")

from transformers import GPT2Config, GPTJConfig  # noqa: E402
from transformers.models.gpt2.modeling_gpt2 import GPT2Block as HFGPT2Block  # noqa: E402
from transformers.models.gptj.modeling_gptj import GPTJBlock as HFGPTJBlock  # noqa: E402

TP = [1, 2, 4]


def gpt2_case(tp: int, dtype: popxl.dtype = popxl.float32) -> Result:
    cfg = TinyConfig(tensor_parallel=tp, dtype=dtype)
    torch.manual_seed(0)
    hf = HFGPT2Block(GPT2Config(n_embd=cfg.hidden_size, n_head=cfg.heads,
                                n_positions=cfg.sequence_length, vocab_size=cfg.vocab_size,
                                n_inner=cfg.ffn_size, activation_function="gelu_new",
                                layer_norm_epsilon=cfg.eps, resid_pdrop=0.0, attn_pdrop=0.0,
                                embd_pdrop=0.0)).eval()
    return _block_case(cfg, hf, GPT2Block)


def gptj_case(tp: int, dtype: popxl.dtype = popxl.float32) -> Result:
    cfg = TinyConfig(tensor_parallel=tp, dtype=dtype)
    torch.manual_seed(0)
    hf = HFGPTJBlock(GPTJConfig(n_embd=cfg.hidden_size, n_head=cfg.heads,
                                n_positions=cfg.sequence_length, vocab_size=cfg.vocab_size,
                                n_inner=cfg.ffn_size, rotary_dim=cfg.rotary_dim,
                                activation_function="gelu_new", layer_norm_epsilon=cfg.eps,
                                resid_pdrop=0.0, attn_pdrop=0.0, embd_pdrop=0.0)).eval()
    return _block_case(cfg, hf, GPTJBlock)


def _block_case(cfg: TinyConfig, hf: torch.nn.Module, block: type) -> Result:
    """A decoder block of ``block``'s kind against the HF block ``hf``, on random weights."""
    _randomise(hf)
    x = np.random.default_rng(1).normal(size=(cfg.micro_batch_size * cfg.sequence_length,
                                              cfg.hidden_size)).astype(np.float32)

    def forward(t: torch.Tensor) -> list[torch.Tensor]:
        shaped = t.reshape(cfg.micro_batch_size, cfg.sequence_length, cfg.hidden_size)
        return [hf(shaped)[0].reshape(t.shape)]

    return compare(cfg, lambda: block(cfg), block.hf_mapping, hf, forward, [x])


def _randomise(module: torch.nn.Module) -> None:
    """Every parameter random (HF initialises biases and norms to constants)."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * (0.2 if p.dim() > 1 else 0.5))


@pytest.mark.parametrize("tp", TP)
def test_gpt2_block_matches_huggingface(tp: int) -> None:
    errors = gpt2_case(tp).errors()
    assert max(errors.values()) < 1e-3, errors


@pytest.mark.parametrize("tp", TP)
def test_gptj_block_matches_huggingface(tp: int) -> None:
    errors = gptj_case(tp).errors()
    assert max(errors.values()) < 1e-3, errors


@pytest.mark.parametrize("case", [gpt2_case, gptj_case], ids=["gpt2", "gptj"])
@pytest.mark.parametrize("tp", [1, 4])
def test_blocks_float16(tp: int, case) -> None:
    """float16 weights and activations (softmax in float32, as the applications do) against
    HF in float32, to ``FLOAT16_RELATIVE_TOL`` (harness)."""
    assert_float16_close(case(tp, popxl.float16))
