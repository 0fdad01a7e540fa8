"""Small learnable synthetic MNIST-style IDX data for the example tests (no download)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from xlgraph.datasets import write_idx


def write_synthetic(root: Path, folder: str, n_train: int, n_test: int,
                    seed: int = 0) -> np.ndarray:
    """Write ``root/folder/raw`` IDX files whose class is a bright bar's row; returns the last
    split's images (the test images)."""
    rng = np.random.default_rng(seed)
    raw = root / folder / "raw"
    raw.mkdir(parents=True)
    images = np.zeros((0, 28, 28), np.uint8)
    for split, n in (("train", n_train), ("t10k", n_test)):
        labels = rng.integers(0, 10, n).astype(np.uint8)
        images = rng.integers(0, 60, (n, 28, 28)).astype(np.uint8)
        for i, c in enumerate(labels):
            images[i, 2 + 2 * c: 4 + 2 * c, 4:24] = 250
        write_idx(raw / f"{split}-images-idx3-ubyte", images)
        write_idx(raw / f"{split}-labels-idx1-ubyte", labels)
    return images
