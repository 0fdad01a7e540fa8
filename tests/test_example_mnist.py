"""The MNIST tutorial example end to end, on synthetic IDX data (CI never downloads MNIST)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from xlgraph.datasets import write_idx

pytestmark = pytest.mark.usefixtures("unverified_data")

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
    sys.path.insert(0, str(EXAMPLE.parent))  # the example imports its neighbours common, plots
    try:
        spec = importlib.util.spec_from_file_location("mnist_example", EXAMPLE)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(EXAMPLE.parent))


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mnist")
    synthetic_mnist(root)
    return root


def test_example_trains_on_synthetic_idx(example, data_dir: Path, tmp_path: Path,
                                         capsys) -> None:
    accuracy = example.main(["--datasets-dir", str(data_dir), "--limit-nbatches", "20",
                             "--lr", "0.05", "--epochs", "2", "--output-dir", str(tmp_path),
                             "--report"])
    out = capsys.readouterr().out
    assert f"Accuracy on test set: {accuracy:.2f}%" in out
    assert "IPU model report: 1 x ipu2 IPU, 4 tiles" in out  # the tutorial fits PopXL's model
    assert "Timer 'epoch 2' took" in out and "Timer 'testing' took" in out
    assert "Epoch 2: 20 steps (1 per Session.run)" in out
    assert accuracy > 60.0  # chance is 10%
    if importlib.util.find_spec("matplotlib"):
        for name in ("training_curve.png", "confusion_matrix.png"):
            assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


def test_device_iterations_train_the_same_weights(example, data_dir: Path) -> None:
    """50 steps per run in a device loop (``ops.repeat``) train exactly as 50 single runs."""
    trained = []
    for per_run in ("1", "5"):
        opts = example.parse_args(["--datasets-dir", str(data_dir), "--limit-nbatches", "10",
                                   "--lr", "0.05", "--device-iterations", per_run])
        np.random.seed(opts.seed)
        train_loader, _ = example.get_mnist_data(opts)
        assert train_loader.num_host_transfers == int(per_run)
        trained.append(example.train(opts, train_loader))
    (w1, losses1), (w5, losses5) = trained
    np.testing.assert_allclose(np.concatenate(losses5), np.concatenate(losses1), rtol=1e-5)
    for name in w1:
        np.testing.assert_allclose(w5[name], w1[name], rtol=1e-5, atol=1e-7)


def test_device_iterations_round_down_to_a_divisor(example, data_dir: Path) -> None:
    opts = example.parse_args(["--datasets-dir", str(data_dir), "--limit-nbatches", "12",
                               "--device-iterations", "5"])
    train_loader, _ = example.get_mnist_data(opts)
    assert train_loader.num_host_transfers == 4 and len(train_loader) == 3


def test_example_flags_and_defaults(example, capsys) -> None:
    opts = example.parse_args([])
    assert (opts.batch_size, opts.test_batch_size, opts.epochs, opts.lr) == (8, 80, 1, 0.005)
    assert opts.limit_nbatches is None and opts.device_iterations == 1
    assert opts.output_dir == Path("runs") / "mnist"
    with pytest.raises(SystemExit):
        example.parse_args(["--help"])
    assert "(default: 0.005)" in " ".join(capsys.readouterr().out.split())


def test_redirected_run_logs_no_progress_redraws(data_dir: Path, tmp_path: Path) -> None:
    """``python mnist.py > log 2>&1`` writes a few lines, not a progress bar per step."""
    log = tmp_path / "log"
    env = {**os.environ, "PYTHONPATH": str(EXAMPLE.parents[2])}
    with log.open("w") as f:
        subprocess.run([sys.executable, str(EXAMPLE), "--datasets-dir", str(data_dir),
                        "--limit-nbatches", "100", "--output-dir", str(tmp_path / "out")],
                       stdout=f, stderr=subprocess.STDOUT, env=env, check=True, cwd=tmp_path)
    text = log.read_text()
    assert "\r" not in text and "it/s" not in text
    assert "Accuracy on test set" in text and len(text.splitlines()) < 15


def test_missing_torchvision_is_one_line(example, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "torchvision", None)
    with pytest.raises(SystemExit, match="--data-source torchvision needs torchvision"):
        example.main(["--data-source", "torchvision"])


def test_two_replicas_of_half_the_batch_train_like_one(example, data_dir: Path,
                                                        tmp_path: Path) -> None:
    """Gradients averaged over 2 replicas of batch 4 equal those of batch 8 (PopXL's RTS
    tutorial), with the weights replicated or sharded (--rts)."""
    common = ["--datasets-dir", str(data_dir), "--limit-nbatches", "12", "--lr", "0.05",
              "--test-batch-size", "16", "--output-dir", str(tmp_path)]
    one = example.main([*common, "--batch-size", "8"])
    two = example.main([*common, "--batch-size", "4", "--replication-factor", "2"])
    rts = example.main([*common, "--batch-size", "4", "--replication-factor", "2", "--rts",
                        "--device-iterations", "3"])
    one_sample = 100 / (12 * 16)  # float rounding may flip one borderline test image
    assert abs(one - two) <= one_sample and abs(one - rts) <= one_sample
    assert one > 20.0  # learnt something on the synthetic digits
