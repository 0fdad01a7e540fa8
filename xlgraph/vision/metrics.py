"""The three ``sklearn.metrics`` names the Fashion-MNIST tutorial uses, for users without
scikit-learn: ``accuracy_score``, ``confusion_matrix`` and ``ConfusionMatrixDisplay``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["accuracy_score", "confusion_matrix", "ConfusionMatrixDisplay"]


def _labels(values: Sequence[Any]) -> np.ndarray:
    return np.array([int(v) for v in values], dtype=np.int64)


def accuracy_score(y_true: Sequence[Any], y_pred: Sequence[Any]) -> float:
    """The fraction of predictions equal to the true labels."""
    return float(np.mean(_labels(y_true) == _labels(y_pred)))


def confusion_matrix(y_true: Sequence[Any], y_pred: Sequence[Any]) -> np.ndarray:
    """``m[i, j]``: how many items of class i were predicted as class j (classes seen in either)."""
    true, pred = _labels(y_true), _labels(y_pred)
    classes = np.unique(np.concatenate([true, pred]))
    index = {c: i for i, c in enumerate(classes)}
    matrix = np.zeros((len(classes), len(classes)), np.int64)
    np.add.at(matrix, ([index[c] for c in true], [index[c] for c in pred]), 1)
    return matrix


class ConfusionMatrixDisplay:
    """A confusion-matrix plot (matplotlib, the ``plot`` extra); ``.plot()`` sets ``figure_``."""

    def __init__(self, confusion_matrix: np.ndarray,
                 display_labels: Sequence[str] | None = None) -> None:
        self.confusion_matrix = np.asarray(confusion_matrix)
        self.display_labels = display_labels

    def plot(self, *, cmap: str = "viridis", xticks_rotation: Any = "horizontal",
             values_format: str = "d", ax: Any = None) -> ConfusionMatrixDisplay:
        """Draw the matrix with matplotlib; sets ``figure_`` and ``ax_``, returns self."""
        import matplotlib.pyplot as plt

        matrix = self.confusion_matrix
        if ax is None:
            _, ax = plt.subplots(layout="constrained")  # room for rotated labels
        image = ax.imshow(matrix, interpolation="nearest", cmap=cmap)
        middle = (matrix.max() + matrix.min()) / 2
        for (i, j), value in np.ndenumerate(matrix):
            ax.text(j, i, format(value, values_format), ha="center", va="center",
                    color="black" if value > middle else "white")
        labels = self.display_labels if self.display_labels is not None else range(len(matrix))
        ax.set(xticks=range(len(matrix)), yticks=range(len(matrix)), xticklabels=labels,
               yticklabels=labels, xlabel="Predicted label", ylabel="True label")
        plt.setp(ax.get_xticklabels(), rotation=xticks_rotation)
        self.figure_ = ax.figure
        self.figure_.colorbar(image, ax=ax)
        self.ax_ = ax
        return self
