"""``MNIST`` and ``FashionMNIST`` with torchvision's constructor, items and folder layout.

Files are read from ``root/<Name>/raw`` (``root/MNIST/raw``, ``root/FashionMNIST/raw``), the
layout torchvision writes, through ``xlgraph.datasets``; with ``download=True`` missing files are
fetched by its checksum-verified offline sources.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from xlgraph import datasets as _data

__all__ = ["MNIST", "FashionMNIST"]


def _pil_image(pixels: np.ndarray) -> Any:
    """A mode-"L" PIL image of ``pixels``, or the array itself when Pillow is not installed."""
    try:
        from PIL import Image
    except ImportError:
        return pixels
    return Image.fromarray(pixels, mode="L")


class MNIST:
    """The MNIST digits, as ``torchvision.datasets.MNIST``.

    Args:
        root: folder holding ``MNIST/raw/`` (``~`` is expanded).
        train: the 60000-image training split, else the 10000-image test split.
        transform: applied to each image (a PIL image, or a uint8 array without Pillow).
        target_transform: applied to each label (an int).
        download: fetch missing files (checksum-verified) instead of raising.

    Attributes:
        data: uint8 images ``(N, 28, 28)`` (a torch tensor when torch is installed).
        targets: labels ``(N,)`` (int64; a torch tensor when torch is installed).
        classes: the class names; ``class_to_idx`` maps them to labels.

    Raises:
        RuntimeError: files missing and ``download=False``, or fetching failed; the message
            says where to put the files.
    """

    classes = ["0 - zero", "1 - one", "2 - two", "3 - three", "4 - four", "5 - five",
               "6 - six", "7 - seven", "8 - eight", "9 - nine"]
    _load: Callable[..., tuple[np.ndarray, np.ndarray]] = staticmethod(_data.load_mnist)

    def __init__(self, root: str | os.PathLike, train: bool = True,
                 transform: Callable[[Any], Any] | None = None,
                 target_transform: Callable[[Any], Any] | None = None,
                 download: bool = False) -> None:
        self.root = os.path.expanduser(os.fspath(root))
        self.train = train
        self.transform = transform
        self.target_transform = target_transform
        try:
            images, labels = type(self)._load(self.root, train=train, download=download)
        except FileNotFoundError as exc:
            raise RuntimeError(f"Dataset not found. You can use download=True to download it. "
                               f"({exc})") from exc
        self._images = images
        self._labels = labels.astype(np.int64)
        self.data, self.targets = self._images, self._labels
        try:
            import torch
        except ImportError:
            return
        self.data, self.targets = torch.from_numpy(images), torch.from_numpy(self._labels)

    @property
    def raw_folder(self) -> str:
        """``root/<Name>/raw``, where the IDX files live."""
        return os.path.join(self.root, type(self).__name__, "raw")

    @property
    def class_to_idx(self) -> dict[str, int]:
        """``{class name: label}``."""
        return {name: i for i, name in enumerate(self.classes)}

    def __len__(self) -> int:
        return len(self._images)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        """``(image, target)``: the transformed image and the (transformed) int label."""
        image = _pil_image(self._images[index])
        target = int(self._labels[index])
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return image, target

    def __repr__(self) -> str:
        split = "Train" if self.train else "Test"
        lines = [f"Dataset {type(self).__name__}", f"    Number of datapoints: {len(self)}",
                 f"    Root location: {self.root}", f"    Split: {split}"]
        if self.transform is not None:
            lines.append(f"    StandardTransform\nTransform: {self.transform!r}")
        return "\n".join(lines)


class FashionMNIST(MNIST):
    """Zalando's Fashion-MNIST, as ``torchvision.datasets.FashionMNIST`` (same arguments)."""

    classes = list(_data.FASHION_MNIST_CLASSES)
    _load = staticmethod(_data.load_fashion_mnist)
