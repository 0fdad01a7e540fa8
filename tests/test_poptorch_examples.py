"""The three PopTorch tutorial programs, run in-process on small synthetic IDX data.

``--data-dir`` holds a few dozen synthetic images (a bright bar whose position gives the
class); the tutorials' settings come from their command lines.
"""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import pytest
from example_data import write_synthetic

torch = pytest.importorskip("torch")
pytest.importorskip("matplotlib")
pytest.importorskip("PIL")

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "mnist"


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("XLGRAPH_DATA_VERIFY", "0")  # synthetic data, not the real files
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(EXAMPLES))
    return tmp_path


def _run(monkeypatch, example: str, *args: str) -> dict:
    monkeypatch.setattr(sys, "argv", [example, *args])
    return runpy.run_path(str(EXAMPLES / example), run_name="__main__")


def test_mnist_demo_runs_unchanged(home, capsys, monkeypatch):
    write_synthetic(home / "data", "MNIST", 40, 160)
    scope = _run(monkeypatch, "poptorch_mnist.py", "--data-dir", str(home / "data"),
                 "--device-iterations", "5", "--epochs", "2")
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


def test_fashion_walkthrough_runs_unchanged(home, capsys, monkeypatch):
    images = write_synthetic(home / "data", "FashionMNIST", 32, 64)
    from PIL import Image

    (home / "images").mkdir()
    Image.fromarray(255 - images[0]).resize((100, 100)).convert("RGB").save(
        home / "images" / "trousers.jpg")
    out_dir = home / "out"
    scope = _run(monkeypatch, "poptorch_fashion.py", "--data-dir", str(home / "data"),
                 "--epochs", "2", "--output-dir", str(out_dir))
    out = capsys.readouterr().out
    assert re.search(r"Eval accuracy: [\d.]+%", out)
    for name in ("sample_images.png", "confusion_matrix.png", "image_before_after.png"):
        assert (out_dir / name).read_bytes()[:4] == b"\x89PNG"
    assert set(torch.load(out_dir / "classifier.pth")) == set(scope["model"].state_dict())
    ipu = re.search(r"IPU predicted class: (.+)", out).group(1)
    cpu = re.search(r"CPU predicted class: (.+)", out).group(1)
    assert ipu == cpu and ipu in scope["classes"]
    assert len(scope["predictions"]) == 64 and scope["cm"].sum() == 64


def test_gpu_port_runs(home, capsys, monkeypatch):
    write_synthetic(home / "data", "FashionMNIST", 64, 48)
    scope = _run(monkeypatch, "poptorch_port.py", "--data-dir", str(home / "data"),
                 "--epochs", "2")
    out = capsys.readouterr().out
    assert re.search(r"Eval accuracy: [\d.]+%", out)
    assert len(scope["train_dataloader"]) == 4 and scope["total"] == 32  # drop_last: 48 -> 32
