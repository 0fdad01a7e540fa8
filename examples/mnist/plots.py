"""PNG figures of a training run: the training curve and the test set's confusion matrix.

Both need matplotlib (the ``plot`` extra); without it ``save_figures`` prints one line saying
so and the run goes on.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

MISSING = "matplotlib is not installed, so no plots were saved (pip install 'xlgraph[plot]')"


def confusion_matrix(preds: np.ndarray, labels: np.ndarray, n: int = 10) -> np.ndarray:
    """``m[i, j]``: how many images of class i were predicted as class j."""
    m = np.zeros((n, n), np.int64)
    np.add.at(m, (labels, preds), 1)
    return m


def per_class_accuracy(matrix: np.ndarray) -> np.ndarray:
    """Percent of each true class (row) predicted correctly."""
    return 100 * np.diag(matrix) / np.maximum(matrix.sum(axis=1), 1)


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _moving_average(values: np.ndarray, window: int) -> np.ndarray:
    kernel = np.ones(window) / window
    return np.convolve(values, kernel, mode="valid")


def plot_training_curve(plt: Any, path: Path, title: str, losses: Sequence[np.ndarray],
                        accuracies: Sequence[float]) -> None:
    """Loss of every step (raw and smoothed) and the test accuracy after each epoch."""
    steps = np.concatenate([np.ravel(epoch) for epoch in losses])
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5),
                                      gridspec_kw={"width_ratios": [2, 1]})
    fig.suptitle(title)
    x = np.arange(1, len(steps) + 1)
    left.plot(x, steps, color="tab:blue", alpha=0.25, linewidth=0.6, label="each step")
    window = max(1, len(steps) // 50)
    if window > 1:
        left.plot(x[window - 1:], _moving_average(steps, window), color="tab:blue",
                  label=f"mean of {window} steps")
    boundary = 0
    for epoch in losses[:-1]:
        boundary += np.size(epoch)
        left.axvline(boundary + 0.5, color="grey", linestyle=":", linewidth=1)
    left.set_xlabel("training step")
    left.set_ylabel("training loss")
    left.set_title("training loss (dotted lines: epoch ends)")
    left.legend(loc="upper right")
    left.grid(alpha=0.3)
    epochs = np.arange(1, len(accuracies) + 1)
    right.plot(epochs, accuracies, marker="o", color="tab:green")
    for e, acc in zip(epochs, accuracies):
        right.annotate(f"{acc:.2f}%", (e, acc), textcoords="offset points", xytext=(0, 7),
                       ha="center", fontsize=8)
    right.set_xticks(epochs)
    right.set_xlim(0.5, len(epochs) + 0.5)
    right.set_xlabel("epoch")
    right.set_ylabel("test accuracy (%)")
    right.set_title("test accuracy after each epoch")
    low, high = min(accuracies), max(accuracies)
    right.set_ylim(max(0.0, low - max(1.0, (high - low) * 0.3)), min(100.0, high + 1.0))
    right.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _cells(ax: Any, values: np.ndarray, text: np.ndarray) -> None:
    threshold = values.max() / 2 if values.max() > 0 else 1
    for (i, j), label in np.ndenumerate(text):
        ax.text(j, i, label, ha="center", va="center", fontsize=7,
                color="white" if values[i, j] > threshold else "black")


def plot_confusion_matrix(plt: Any, path: Path, title: str, matrix: np.ndarray,
                          class_names: Sequence[str]) -> None:
    """Counts per (true, predicted) class, and the same normalised per true class."""
    total = int(matrix.sum())
    accuracy = 100 * np.trace(matrix) / max(total, 1)
    rows = np.maximum(matrix.sum(axis=1, keepdims=True), 1)
    normalised = 100 * matrix / rows
    fig, axes = plt.subplots(1, 2, figsize=(15, 6.8))
    fig.suptitle(f"{title}: confusion matrix of the test set "
                 f"({total} images, {accuracy:.2f}% correct)")
    labels = [f"{name} ({acc:.1f}%)" for name, acc in
              zip(class_names, per_class_accuracy(matrix))]
    panels = (
        (axes[0], matrix, matrix.astype(str), "counts", "images"),
        (axes[1], normalised, np.char.mod("%.1f", normalised),
         "% of each true class (diagonal: per-class accuracy)", "% of the row"),
    )
    for ax, values, text, subtitle, unit in panels:
        image = ax.imshow(values, cmap="Blues")
        _cells(ax, values, text)
        ax.set_title(subtitle)
        ax.set_xticks(range(len(class_names)), class_names, rotation=45, ha="right")
        ax.set_yticks(range(len(class_names)), labels if ax is axes[0] else class_names)
        ax.set_xlabel("predicted class")
        ax.set_ylabel("true class (per-class accuracy)" if ax is axes[0] else "true class")
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label=unit)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def save_figures(out_dir: Path, title: str, losses: Sequence[np.ndarray],
                 accuracies: Sequence[float], matrix: np.ndarray,
                 class_names: Sequence[str]) -> list[Path]:
    """Write ``training_curve.png`` and ``confusion_matrix.png``; returns the paths written."""
    plt = _pyplot()
    if plt is None:
        print(MISSING)
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    curve, confusion = out_dir / "training_curve.png", out_dir / "confusion_matrix.png"
    plot_training_curve(plt, curve, title, losses, accuracies)
    plot_confusion_matrix(plt, confusion, title, matrix, class_names)
    print(f"Saved {curve} and {confusion}")
    return [curve, confusion]
