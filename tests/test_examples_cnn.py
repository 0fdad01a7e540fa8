"""Both CNN examples end to end on small synthetic IDX data (real data runs are in the README)."""

from __future__ import annotations

import importlib.util
import io
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import xlgraph
from xlgraph import checkpoint, training
from xlgraph.datasets import FASHION_MNIST_CLASSES, write_idx

pytestmark = pytest.mark.usefixtures("unverified_data")

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "mnist"


@pytest.fixture
def examples(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    for name in ("common", "plots", "cnn", "fashion"):
        sys.modules.pop(name, None)
    import cnn
    import fashion

    return cnn, fashion


def _is_png(path: Path) -> bool:
    return path.is_file() and path.read_bytes()[:4] == b"\x89PNG"


def _write_dataset(root: Path, folder: str, seed: int) -> np.ndarray:
    """Write class-dependent synthetic images; returns the test images."""
    rng = np.random.default_rng(seed)
    raw = root / folder / "raw"
    raw.mkdir(parents=True)
    test_images = None
    for split, n in (("train", 96), ("t10k", 80)):
        labels = rng.integers(0, 10, n).astype(np.uint8)
        images = rng.integers(0, 60, (n, 28, 28)).astype(np.uint8)
        for i, c in enumerate(labels):  # a bright bar whose place gives the class
            images[i, 2 + 2 * c: 4 + 2 * c, 4:24] = 250
        write_idx(raw / f"{split}-images-idx3-ubyte", images)
        write_idx(raw / f"{split}-labels-idx1-ubyte", labels)
        test_images = images
    return test_images


def test_mnist_cnn_runs(examples, tmp_path, capsys):
    cnn, _ = examples
    _write_dataset(tmp_path, "MNIST", 0)
    results = cnn.main(["--datasets-dir", str(tmp_path), "--limit-nbatches", "4",
                        "--epochs", "2", "--test-batch-size", "8", "--device-iterations", "2",
                        "--output-dir", str(tmp_path / "out"), "--report"])
    out = capsys.readouterr().out
    assert "IPU model report: 1 x ipu2 IPU, 1472 tiles" in out
    assert [r.epoch for r in results] == [1, 2]
    assert all(0 <= r.accuracy <= 100 and np.isfinite(r.loss) for r in results)
    assert all(r.losses.shape == (4,) and 0 < r.step_seconds <= r.seconds for r in results)
    assert "4 batches of 8 per epoch, 2 per run" in out
    assert "s in Session.run)" in out
    assert f"Accuracy on test set: {results[-1].accuracy:.2f}%" in out
    if importlib.util.find_spec("matplotlib"):
        assert _is_png(tmp_path / "out" / "training_curve.png")
        assert _is_png(tmp_path / "out" / "confusion_matrix.png")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_counts_batches_and_redraws_rarely(examples, monkeypatch):
    import common

    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with common.Progress(2000, "Epoch 1/1") as progress:
        for _ in range(40):  # 40 runs of 50 batches each
            progress.advance(50, np.full(50, 0.25, np.float32))
    text = terminal.getvalue()
    assert "2000/2000" in text and "loss=0.2500" in text
    assert text.count("\r") < 10  # the first and last draws, and one per 0.5 s


def test_progress_is_silent_when_not_a_terminal(examples, monkeypatch):
    import common

    pipe = io.StringIO()
    monkeypatch.setattr(sys, "stderr", pipe)
    with common.Progress(100, "Epoch 1/1") as progress:
        for _ in range(100):
            progress.advance(1, np.ones(1))
    assert pipe.getvalue() == ""


def test_mnist_cnn_parameters_match_the_torch_model(examples):
    cnn, _ = examples
    shapes = {k: p.spec.shape for k, p in cnn.Network().parameters().items()}
    assert shapes == {
        "layer1.conv.weight": (32, 1, 3, 3), "layer1.conv.bias": (32,),
        "layer2.conv.weight": (64, 32, 3, 3), "layer2.conv.bias": (64,),
        "layer3.weight": (128, 1600), "layer3.bias": (128,),
        "layer4.weight": (10, 128), "layer4.bias": (10,),
    }


def test_fashion_trains_reports_and_predicts(examples, tmp_path, capsys):
    _, fashion = examples
    test_images = _write_dataset(tmp_path, "FashionMNIST", 1)
    out_dir = tmp_path / "out"
    results = fashion.main(["--datasets-dir", str(tmp_path), "--limit-nbatches", "3",
                            "--epochs", "1", "--test-batch-size", "16",
                            "--output-dir", str(out_dir)])
    printed = capsys.readouterr().out
    assert len(results) == 1
    for name in FASHION_MNIST_CLASSES:
        assert f"  {name:<12}" in printed
    rows = [line for line in printed.splitlines() if line.startswith("  ") and
            line.split()[0].isdigit() and len(line.split()) == 11]
    assert sum(int(v) for row in rows for v in row.split()[1:]) == 48  # 3 batches of 16
    weights = checkpoint.load(out_dir / "fashion_weights.npz")
    assert weights["fc1.weight"].shape == (100, 972)
    assert weights["norm.weight"].shape == (12,)

    # --predict: an inverted (light background) PNG must give the class the model gives the
    # original image
    pil = pytest.importorskip("PIL.Image")
    img = test_images[5]
    pil.fromarray(255 - img).save(tmp_path / "item.png")
    label = fashion.main(["--predict", str(tmp_path / "item.png"),
                          "--output-dir", str(out_dir)])
    assert f"Predicted class: {label}" in capsys.readouterr().out
    ir = xlgraph.Ir()
    step = training.build_inference(ir, fashion.ClassificationModel(),
                                    [xlgraph.TensorSpec((1, 1, 28, 28), xlgraph.float32)])
    session = xlgraph.Session(ir)
    checkpoint.load_into(session, weights)
    x = xlgraph.datasets.normalize(img, fashion.FASHION_MNIST_MEAN, fashion.FASHION_MNIST_STD)
    with session:
        (log_probs,) = step.run(session, x.reshape(1, 1, 28, 28))
    assert label == FASHION_MNIST_CLASSES[int(np.argmax(log_probs))]


def test_confusion_matrix_and_png(examples, tmp_path, capsys):
    _, fashion = examples
    import plots

    preds = np.array([0, 1, 1, 2, 9])
    labels = np.array([0, 1, 2, 2, 9])
    m = plots.confusion_matrix(preds, labels)
    assert m[2, 1] == 1 and m[2, 2] == 1 and m.sum() == 5
    np.testing.assert_allclose(plots.per_class_accuracy(m)[[0, 2, 3]], [100, 50, 0])
    text = fashion.report(m)
    assert re.search(r"Pullover +50\.00%", text)  # class 2: one of two right
    pytest.importorskip("matplotlib")
    written = plots.save_figures(tmp_path / "figs", "test", [np.ones(5), np.ones(3)],
                                 [50.0, 60.0], m, FASHION_MNIST_CLASSES)
    assert [p.name for p in written] == ["training_curve.png", "confusion_matrix.png"]
    assert all(_is_png(p) for p in written)
    assert f"Saved {written[0]}" in capsys.readouterr().out


def test_missing_extras_and_weights_end_with_one_line(examples, tmp_path, monkeypatch, capsys):
    _, fashion = examples
    import plots

    with pytest.raises(SystemExit, match="no saved weights at .*train first with"):
        fashion.main(["--predict", "item.png", "--output-dir", str(tmp_path)])
    (tmp_path / "fashion_weights.npz").write_bytes(b"")
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(SystemExit, match=re.escape("--predict needs PIL, which is not installed: "
                                                   "pip install 'xlgraph[image]'")):
        fashion.main(["--predict", "item.png", "--output-dir", str(tmp_path)])
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert plots.save_figures(tmp_path, "t", [np.ones(2)], [1.0], np.eye(10, dtype=int),
                              FASHION_MNIST_CLASSES) == []
    assert capsys.readouterr().out.strip() == plots.MISSING


def test_help_shows_defaults(examples, capsys):
    cnn, fashion = examples
    for module, default in ((cnn, "(default: 0.03)"), (fashion, "(default: 0.9)")):
        with pytest.raises(SystemExit):
            module.parse_args(["--help"])
        assert default in " ".join(capsys.readouterr().out.split())
    assert str(cnn.parse_args([]).output_dir) == str(Path("runs") / "cnn")
