"""``benchmarks/transformer.py``'s contenders compute the same thing: from the same weights,
the same losses over two training steps (so the same AdamW update), and the same greedy
tokens from xlgraph's KV-cache generation and HuggingFace's ``generate``. The tiny sizes keep
it fast; nothing here is timed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import gpt_generate  # noqa: E402
import gpt_model as gm  # noqa: E402
import gpt_peers  # noqa: E402

import xlgraph as popxl  # noqa: E402

CFG, BATCH = gm.TINY, 2


def xlgraph_losses(half: bool = False, steps: int = 2) -> list[float]:
    ir, tok_s, loss_s, named = gm.build_train(CFG, BATCH, half=half)
    session = popxl.Session(ir)
    gm.load(session, named, gm.initial_weights(CFG))
    data = gm.token_batches(CFG, BATCH)
    with session:
        return [float(session.run({tok_s: data[i]})[loss_s]) for i in range(steps)]


def peer_losses(step, steps: int = 2) -> list[float]:
    data = gm.token_batches(CFG, BATCH)
    return [float(step(data[i])) for i in range(steps)]


def test_xlgraph_and_torch_train_alike() -> None:
    pytest.importorskip("torch")
    ours = xlgraph_losses()
    assert abs(ours[0] - np.log(CFG.vocab)) < 0.2  # near-uniform logits from small weights
    theirs = peer_losses(gpt_peers.torch_train(CFG, gm.initial_weights(CFG)))
    np.testing.assert_allclose(ours, theirs, rtol=2e-5)
    assert ours[1] != ours[0]  # the second step sees the updated weights


def test_xlgraph_and_jax_train_alike() -> None:
    pytest.importorskip("jax")
    ours = xlgraph_losses()
    theirs = peer_losses(gpt_peers.jax_train(CFG, gm.initial_weights(CFG)))
    np.testing.assert_allclose(ours, theirs, rtol=2e-5)


def test_the_float16_step_follows_the_float32_step() -> None:
    full, half = xlgraph_losses(), xlgraph_losses(half=True)
    np.testing.assert_allclose(half, full, rtol=2e-3)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_torch_low_precision_steps_follow_float32(dtype: str) -> None:
    pytest.importorskip("torch")
    full = peer_losses(gpt_peers.torch_train(CFG, gm.initial_weights(CFG)))
    low = peer_losses(gpt_peers.torch_train(CFG, gm.initial_weights(CFG), half=True,
                                            half_dtype=dtype))
    np.testing.assert_allclose(low, full, rtol=2e-2)
    assert low != full  # autocast did compute in low precision


def test_generation_matches_huggingface() -> None:
    pytest.importorskip("transformers")
    weights = gm.initial_weights(CFG)
    # larger weights than the initial 0.02, so that the greedy tokens vary along the sequence
    weights = {k: v * 40 if v.ndim == 2 else v for k, v in weights.items()}
    prompt = gm.token_batches(CFG, BATCH)[0][:, :3]
    with gpt_generate.Generator(CFG, weights, BATCH, 3, 12) as generate:
        ours = generate(prompt)
        again = generate(prompt)  # the caches of the first call are overwritten or masked
    generate.__exit__(None, None, None)  # the constructor's attach
    theirs = gpt_peers.hf_generate(CFG, weights, 12)(prompt)
    assert len(set(ours[0, 3:].tolist())) > 2  # not one token repeated
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(again, theirs)


def test_the_prefill_writes_the_caches_the_decode_step_writes() -> None:
    """The prompt in one run leaves the keys and values that running it token by token leaves
    (to float32 rounding: matrix rows against vectors)."""
    weights = gm.initial_weights(CFG)
    prompt = gm.token_batches(CFG, BATCH)[0][:, :4]
    generate = gpt_generate.Generator(CFG, weights, BATCH, 4, 2)
    ir, ids_s, pos_s, next_s, named = gm.build_decode(CFG, BATCH, 6)
    session = popxl.Session(ir)
    gm.load(session, named, weights)
    with session:
        for i in range(4):
            last = session.run({ids_s: prompt[:, i], pos_s: np.array([i], np.int32)})[next_s]
    stepped = {v.name: a for v, a in session.get_tensors_data(
        [v for v in ir.main_graph.variables if v.name.endswith("_cache")]).items()}
    with generate:
        out = generate(prompt)
        filled = {v.name: a for v, a in generate.decode.get_tensors_data(
            list(generate._caches)).items()}
    generate.__exit__(None, None, None)
    assert len(filled) == 2 * CFG.layers
    for name, cache in filled.items():
        np.testing.assert_allclose(cache[:, :, :4], stepped[name][:, :, :4], rtol=1e-5,
                                   atol=1e-6)
    np.testing.assert_array_equal(out[:, 4], last)


def test_flags_parse_without_measuring(capsys) -> None:
    import transformer

    opts = transformer.parse_args(["--quick", "--threads", "1", "--skip", "rss", "generate"])
    assert (opts.quick, opts.threads, opts.skip, opts.tiny) == (True, [1], ["rss", "generate"],
                                                                 False)
    assert opts.torch_half == "bfloat16"
    assert transformer.parse_args(["--torch-half", "float16"]).torch_half == "float16"
    assert (opts.rounds, transformer.parse_args(["--rounds", "7"]).rounds) == (None, 7)
    with pytest.raises(SystemExit):
        transformer.parse_args(["--help"])
    assert "--skip" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        transformer.parse_args(["--rounds", "0"])
    assert "--rounds must be at least 1, got 0" in capsys.readouterr().err


def test_torch_float16_is_timed_beside_its_bfloat16(capsys) -> None:
    import transformer

    assert transformer.parse_args([]).contenders == list(transformer.TRAIN)
    transformer.main(["--tiny", "--quick", "--threads", "1", "--skip", "train", "generate",
                      "rss", "--torch-half", "float16", "--contenders", "xlgraph", "torch"])
    result = json.loads(capsys.readouterr().out)
    half = result["best"]["train_b8_half"]
    assert result["torch_half"] == "float16"
    assert set(half["us_per_step"]) == {"xlgraph", "torch", "torch_bfloat16"}
    assert set(half["ratios"]) == {"xlgraph/torch", "xlgraph/torch_bfloat16"}
