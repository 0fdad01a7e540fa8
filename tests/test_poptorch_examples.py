"""The three PopTorch tutorial programs, run unchanged on small synthetic IDX data.

``HOME`` points at a temporary folder so the seeds' ``~/.torch/datasets`` holds a few hundred
synthetic images (a bright bar whose position gives the class); seed 003 reads ``../datasets``.
"""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("matplotlib")
pytest.importorskip("PIL")

from xlgraph.datasets import write_idx  # noqa: E402

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "mnist"


def _write(root: Path, folder: str, n_train: int, n_test: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    raw = root / folder / "raw"
    raw.mkdir(parents=True)
    for split, n in (("train", n_train), ("t10k", n_test)):
        labels = rng.integers(0, 10, n).astype(np.uint8)
        images = rng.integers(0, 60, (n, 28, 28)).astype(np.uint8)
        for i, c in enumerate(labels):
            images[i, 2 + 2 * c: 4 + 2 * c, 4:24] = 250
        write_idx(raw / f"{split}-images-idx3-ubyte", images)
        write_idx(raw / f"{split}-labels-idx1-ubyte", labels)
    return images


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_mnist_demo_runs_unchanged(home, capsys):
    _write(home / ".torch" / "datasets", "MNIST", 400, 160)
    scope = runpy.run_path(str(EXAMPLES / "poptorch_mnist.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "(layer3_dropout): Dropout(p=0.5, inplace=False)" in out
    accuracy = float(re.search(r"Accuracy on test set: ([\d.]+)%", out).group(1))
    assert 0 <= accuracy <= 100
    assert not scope["inference_model"].isAttachedToDevice()
    # the trained weights are in the user's module: the CPU model agrees with the IPU model
    data, labels = next(iter(scope["test_data"]))
    model = scope["model"].eval()
    cpu = scope["accuracy"](model(data), labels)
    assert abs(cpu - scope["accuracy"](scope["inference_model"](data), labels)) < 1e-9


def test_fashion_walkthrough_runs_unchanged(home, capsys):
    images = _write(home / ".torch" / "datasets", "FashionMNIST", 64, 64)
    from PIL import Image

    (home / "images").mkdir()
    Image.fromarray(255 - images[0]).resize((100, 100)).convert("RGB").save(
        home / "images" / "trousers.jpg")
    scope = runpy.run_path(str(EXAMPLES / "poptorch_fashion.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert re.search(r"Eval accuracy: [\d.]+%", out)
    for name in ("sample_images.png", "confusion_matrix.png", "image_before_after.png"):
        assert (home / name).read_bytes()[:4] == b"\x89PNG"
    assert set(torch.load(home / "classifier.pth")) == set(scope["model"].state_dict())
    ipu = re.search(r"IPU predicted class: (.+)", out).group(1)
    cpu = re.search(r"CPU predicted class: (.+)", out).group(1)
    assert ipu == cpu and ipu in scope["classes"]
    assert len(scope["predictions"]) == 64 and scope["cm"].sum() == 64


def test_gpu_port_runs(home, capsys):
    _write(home / "datasets", "FashionMNIST", 64, 48)
    (home / "run").mkdir()
    import os

    os.chdir(home / "run")
    scope = runpy.run_path(str(EXAMPLES / "poptorch_port.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert re.search(r"Eval accuracy: [\d.]+%", out)
    assert len(scope["train_dataloader"]) == 4 and scope["total"] == 32  # drop_last: 48 -> 32
