"""examples/gpt at the tiny config: pretraining lowers the loss, a checkpoint resumes with
data parallelism and gradient accumulation, generation runs from it, and the KV-cache decode
step gives the whole-sequence model's logits at every position."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import xlgraph as popxl

GPT = Path(__file__).resolve().parent.parent / "examples" / "gpt"
sys.path.insert(0, str(GPT))

import generate  # noqa: E402
import pretrain  # noqa: E402
from config import CONFIGS  # noqa: E402
from model import GPTDecodeStep, GPTLogits  # noqa: E402


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("gpt") / "ckpt"
    losses = pretrain.main(["--config", "tiny", "--steps", "30", "--checkpoint", str(folder)])
    assert len(losses) == 30
    assert np.mean(losses[-5:]) < losses[0] - 0.4, losses  # it learns: ln(vocab) ~ 3.3 at first
    return folder


def test_resume_with_data_parallel_and_accumulation(checkpoint: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture) -> None:
    again = tmp_path / "again"
    losses = pretrain.main(["--config", "tiny", "--steps", "2", "--resume", str(checkpoint),
                            "--data_parallel", "2", "--gradient_accumulation", "2",
                            "--checkpoint", str(again)])
    assert "resumed from" in capsys.readouterr().out and len(losses) == 2
    info = json.loads((again / "session_info.json").read_text())
    assert info["steps"] == 32 and info["config"]["data_parallel"] == 2
    assert losses[0] < 3.0  # it starts from the trained weights (fresh: ~3.3)


def test_generate_from_checkpoint(checkpoint: Path) -> None:
    text = generate.main(["--checkpoint", str(checkpoint), "--prompt", "the ", "--tokens", "5"])
    assert text.startswith("the ") and len(text) == 9


def test_cached_decoding_equals_the_whole_sequence_model() -> None:
    cfg = CONFIGS["tiny"].__class__(**{**CONFIGS["tiny"].__dict__, "vocab_size": 20,
                                       "micro_batch_size": 1})
    seq = cfg.sequence_length
    words = np.random.default_rng(0).integers(0, 20, seq).astype(np.int32)
    spec = popxl.TensorSpec((seq,), popxl.int32)
    ir = popxl.Ir()
    with ir.main_graph:
        facts, graph = GPTLogits(cfg).create_graph(spec, spec)
        variables = facts.init()
        logits, = graph.bind(variables).call(popxl.constant(words), popxl.constant(
            np.arange(seq, dtype=np.int32)))
        full_s = popxl.d2h_stream(logits.shape, logits.dtype)
        popxl.ops.host_store(full_s, logits)
    with popxl.Session(ir, "cpu") as session:
        full = session.run()[full_s]
        weights = {name: session.get_tensor_data(t) for name, t in variables.to_dict().items()}

    ir = popxl.Ir()
    with ir.main_graph:
        word_s = popxl.h2d_stream((1,), popxl.int32)
        pos_s = popxl.h2d_stream((), popxl.int32)
        facts, graph = GPTDecodeStep(cfg).create_graph(popxl.TensorSpec((1,), popxl.int32),
                                                       popxl.TensorSpec((), popxl.int32))
        step_vars = facts.init()
        logits, = graph.bind(step_vars).call(popxl.ops.host_load(word_s),
                                             popxl.ops.host_load(pos_s))
        out_s = popxl.d2h_stream(logits.shape, logits.dtype)
        popxl.ops.host_store(out_s, logits)
    with popxl.Session(ir, "cpu") as session:
        session.write_variables_data({t: weights[name] for name, t in step_vars.to_dict().items()
                                      if name in weights})
        for p in range(seq):
            got = session.run({word_s: words[p:p + 1], pos_s: np.array(p, np.int32)})[out_s]
            np.testing.assert_allclose(got[0], full[p], rtol=1e-5, atol=1e-5)


def test_ipu_model_report_of_the_tiny_config(capsys: pytest.CaptureFixture) -> None:
    """On the whole-chip model the variables are the tiny model's weights and Adam's two
    moments in float32 (plus each Adam step counter): counted from the architecture."""
    pretrain.main(["--config", "tiny", "--steps", "1", "--device", "ipu_model"])
    out = capsys.readouterr().out
    assert "1472 tiles" in out
    line = next(t for t in out.splitlines() if "always-live per category" in t)
    variables = int(line.split("variables ")[1].split(", constants")[0].replace(",", ""))
    cfg = CONFIGS["tiny"]
    h, chars = cfg.hidden_size, 28  # the corpus's characters
    rows = 32 + cfg.sequence_length  # embedding tables, padded to multiples of 16 rows
    params = rows * h + cfg.layers * (12 * h * h + 13 * h) + 2 * h + h * chars
    assert 3 * params * 4 <= variables <= 3 * params * 4 + 1024, (variables, params)


def _weights(folder: Path) -> dict[str, np.ndarray]:
    return {f.name[:-4]: np.load(f)[f.name[:-4]] for f in (folder / "model").glob("*.npz")}


def test_phased_training_equals_the_plain_form(tmp_path: Path) -> None:
    """``--phased`` (every weight in remote buffers, batch-serialised phases) from the same
    seed: the same losses and, in its checkpoint, the same weights and Adam state as the plain
    form, to float32 rounding; the checkpoint resumes in the plain form and generates."""
    args = ["--config", "tiny", "--steps", "3", "--layers", "2", "--gradient_accumulation", "2"]
    plain = pretrain.main([*args, "--checkpoint", str(tmp_path / "plain")])
    phased = pretrain.main([*args, "--phased", "--checkpoint", str(tmp_path / "phased")])
    np.testing.assert_allclose(phased, plain, rtol=1e-6)
    want, got = _weights(tmp_path / "plain"), _weights(tmp_path / "phased")
    assert sorted(got) == sorted(want) and any(k.startswith("optimizer.layer1.") for k in got)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-7, err_msg=name)
    resumed = pretrain.main(["--config", "tiny", "--steps", "1", "--layers", "2",
                             "--resume", str(tmp_path / "phased")])
    again = pretrain.main([*args[:2], "--steps", "1", "--layers", "2", "--phased",
                           "--resume", str(tmp_path / "plain")])
    np.testing.assert_allclose(resumed, again, rtol=1e-5)
    text = generate.main(["--checkpoint", str(tmp_path / "phased"), "--prompt", "the ",
                          "--tokens", "4"])
    assert text == generate.main(["--checkpoint", str(tmp_path / "plain"), "--prompt", "the ",
                                  "--tokens", "4"])
