"""Every example is a command-line program: ``--help`` answers without training, and a
one-batch run on synthetic data writes only into ``--output-dir`` and keeps its log small."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from example_data import write_synthetic

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "mnist"
TORCH = ("poptorch_mnist", "poptorch_fashion", "poptorch_port")
# flags that make each example's epoch one training batch of the synthetic data below
ONE_BATCH = {
    "mnist": ["--batch-size", "8", "--test-batch-size", "8"],
    "cnn": ["--batch-size", "8", "--test-batch-size", "8", "--device-iterations", "1"],
    "fashion": ["--batch-size", "8", "--test-batch-size", "8", "--device-iterations", "1"],
    "poptorch_mnist": ["--batch-size", "4", "--device-iterations", "2",
                       "--test-batch-size", "32"],
    "poptorch_fashion": ["--batch-size", "8"],
    "poptorch_port": ["--batch-size", "8", "--test-batch-size", "32"],
}
WRITES = {
    "mnist": {"training_curve.png", "confusion_matrix.png"},
    "cnn": {"training_curve.png", "confusion_matrix.png"},
    "fashion": {"training_curve.png", "confusion_matrix.png", "fashion_weights.npz"},
    "poptorch_mnist": set(),
    "poptorch_fashion": {"sample_images.png", "classifier.pth", "confusion_matrix.png"},
    "poptorch_port": set(),
}


def _run(example: str, args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path / "home"),
           "XLGRAPH_DATA_VERIFY": "0", "MPLBACKEND": "Agg",
           "MPLCONFIGDIR": str(tmp_path / "matplotlib")}  # matplotlib's own font cache
    env.pop("XLGRAPH_DATA", None)
    env.pop("XLGRAPH_DATASETS", None)
    return subprocess.run([sys.executable, str(EXAMPLES / f"{example}.py"), *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300)


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("example", sorted(ONE_BATCH))
def test_help_lists_the_shared_flags_and_trains_nothing(example, tmp_path):
    result = _run(example, ["--help"], tmp_path)
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    for flag in ("--epochs", "--batch-size", "--output-dir", "--data-dir"):
        assert flag in text
    assert f"(default: {Path('runs') / example})" in text and "(default: ~/.torch/datasets)" in text
    assert not _files(tmp_path / "cwd") and not (tmp_path / "home").exists()


@pytest.mark.parametrize("example", sorted(ONE_BATCH))
def test_one_batch_run_writes_only_to_its_output_dir(example, tmp_path):
    if example in TORCH or example == "fashion":
        pytest.importorskip("torch" if example in TORCH else "numpy")
    data = tmp_path / "data"
    folder = "MNIST" if "mnist" in example or example == "cnn" else "FashionMNIST"
    write_synthetic(data, folder, 8, 32)
    before = _files(data)
    out = tmp_path / "out"
    result = _run(example, ["--epochs", "1", "--data-dir", str(data), "--output-dir", str(out),
                            *ONE_BATCH[example]], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    log = result.stdout + result.stderr
    assert "\r" not in log and len(log.splitlines()) < 40  # no progress bars in a pipe
    assert "ccuracy" in log
    assert _files(data) == before and not _files(tmp_path / "cwd")
    assert not (tmp_path / "home").exists()
    expected = WRITES[example]
    if not _has("matplotlib"):
        expected = {n for n in expected if not n.endswith(".png")}
    assert _files(out) == expected if expected else not out.exists() or not _files(out)
    if example == "poptorch_fashion":  # the tutorial's photo is absent: one line, no crash
        assert "images/trousers.jpg not found: skipped classifying it" in result.stdout


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None
