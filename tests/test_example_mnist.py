"""The MNIST tutorial example end to end, on synthetic IDX data (CI never downloads MNIST)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from xlgraph.datasets import write_idx

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "mnist" / "mnist.py"


def synthetic_mnist(root: Path, n_train: int = 2000, n_test: int = 800) -> None:
    """Learnable fake MNIST: class c lights up rows 2c..2c+2, plus noise."""
    rng = np.random.default_rng(0)
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = rng.integers(0, 10, n).astype(np.uint8)
        images = rng.integers(0, 60, (n, 28, 28)).astype(np.uint8)
        for c in range(10):
            images[labels == c, 2 * c + 4: 2 * c + 6, 4:24] = 255
        write_idx(raw / f"{prefix}-images-idx3-ubyte", images)
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", labels)


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("mnist_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_example_trains_on_synthetic_idx(example, tmp_path: Path, capsys) -> None:
    synthetic_mnist(tmp_path)
    accuracy = example.main(["--datasets-dir", str(tmp_path), "--limit-nbatches", "20",
                             "--lr", "0.05", "--epochs", "2"])
    out = capsys.readouterr().out
    assert f"Accuracy on test set: {accuracy:.2f}%" in out
    assert "Timer 'epoch 2' took" in out and "Timer 'testing' took" in out
    assert accuracy > 60.0  # chance is 10%


def test_example_flags_and_defaults(example) -> None:
    opts = example.parse_args([])
    assert (opts.batch_size, opts.test_batch_size, opts.epochs, opts.lr) == (8, 80, 1, 0.005)
    assert opts.limit_nbatches is None
