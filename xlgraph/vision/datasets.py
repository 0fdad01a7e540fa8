"""``MNIST`` and ``FashionMNIST`` with torchvision's constructor, items and folder layout.

Files are read from ``root/<Name>/raw`` (``root/MNIST/raw``, ``root/FashionMNIST/raw``), the
layout torchvision writes, through ``xlgraph.datasets``; with ``download=True`` missing files are
fetched by its checksum-verified offline sources.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from xlgraph import datasets as _data
from xlgraph.vision.batching import batched

__all__ = ["MNIST", "FashionMNIST", "CIFAR10", "FakeData"]


def _pil_image(pixels: np.ndarray) -> Any:
    """A PIL image of ``pixels`` (mode "L" or "RGB"), or the array itself without Pillow."""
    try:
        from PIL import Image
    except ImportError:
        return pixels
    return Image.fromarray(pixels)


def _transformed(dataset: Any, image: Any, target: Any) -> tuple[Any, Any]:
    """``(image, target)`` through the dataset's ``transform`` and ``target_transform``."""
    if dataset.transform is not None:
        image = dataset.transform(image)
    if dataset.target_transform is not None:
        target = dataset.target_transform(target)
    return image, target


class _Batches:
    """Many items at once, for the datasets that keep their raw pixels in one uint8 array: the
    transform runs once on the whole batch when it has a batch form (``batching.batched``)."""

    transform: Callable[[Any], Any] | None
    target_transform: Callable[[Any], Any] | None

    def _pixels(self) -> np.ndarray:
        raise NotImplementedError

    def _targets(self, indices: np.ndarray) -> list[Any]:
        raise NotImplementedError

    def _transformed_images(self, indices: np.ndarray) -> Any:
        batch = batched(self.transform)
        return None if batch is None else batch(self._pixels()[indices])

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[Any, Any]]:
        """Items ``indices`` at once (torch's ``DataLoader`` asks for a batch this way): equal
        to ``[self[i] for i in indices]``."""
        indices = np.asarray(indices, np.int64)
        images = self._transformed_images(indices)
        if images is None:
            return [self[int(i)] for i in indices]  # type: ignore[index]
        targets = self._targets(indices)
        if self.target_transform is not None:
            targets = [self.target_transform(t) for t in targets]
        return list(zip(images, targets))

    def collated_batch(self, indices: Sequence[int]) -> list[Any] | None:
        """``[images, targets]``: what torch's ``default_collate`` makes of
        ``self.__getitems__(indices)``, without the per-item detour (``poptorch.DataLoader`` asks
        for it); None when the transform has no batch form, a ``target_transform`` is set or
        torch is not installed."""
        try:
            import torch
        except ImportError:
            return None
        if self.target_transform is not None:
            return None
        indices = np.asarray(indices, np.int64)
        images = self._transformed_images(indices)
        return None if images is None else [images, torch.tensor(self._targets(indices))]


class MNIST(_Batches):
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
        return _transformed(self, image, target)

    def _pixels(self) -> np.ndarray:
        return self._images

    def _targets(self, indices: np.ndarray) -> list[Any]:
        return self._labels[indices].tolist()

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


class CIFAR10(_Batches):
    """CIFAR-10, as ``torchvision.datasets.CIFAR10``, read from ``root/cifar-10-batches-py``
    (the python-pickle batches torchvision downloads). ``download=True`` cannot fetch them
    here: a missing folder raises with where to put it.

    Items are ``(RGB PIL image 32x32, int label)`` before the transforms.
    """

    base_folder = "cifar-10-batches-py"
    train_list = [f"data_batch_{i}" for i in range(1, 6)]
    test_list = ["test_batch"]
    classes = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
               "truck"]

    def __init__(self, root: str | os.PathLike, train: bool = True,
                 transform: Callable[[Any], Any] | None = None,
                 target_transform: Callable[[Any], Any] | None = None,
                 download: bool = False) -> None:
        import pickle

        self.root = os.path.expanduser(os.fspath(root))
        self.train, self.transform, self.target_transform = train, transform, target_transform
        folder = os.path.join(self.root, self.base_folder)
        images, labels = [], []
        for name in self.train_list if train else self.test_list:
            path = os.path.join(folder, name)
            if not os.path.exists(path):
                raise RuntimeError(f"Dataset not found or corrupted: {path} is missing. Put "
                                   f"cifar-10-python.tar.gz's {self.base_folder} folder in "
                                   f"{self.root} (download=True cannot fetch it here)")
            with open(path, "rb") as f:
                entry = pickle.load(f, encoding="latin1")  # noqa: S301 - torchvision's format
            images.append(np.asarray(entry["data"], np.uint8).reshape(-1, 3, 32, 32))
            labels += list(entry.get("labels", entry.get("fine_labels", [])))
        self.data = np.concatenate(images).transpose(0, 2, 3, 1)  # (N, 32, 32, 3), as torchvision
        self.targets = [int(v) for v in labels]

    @property
    def class_to_idx(self) -> dict[str, int]:
        """``{class name: label}``."""
        return {name: i for i, name in enumerate(self.classes)}

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        """``(image, target)`` after the transforms."""
        image, target = _pil_image(self.data[index]), self.targets[index]
        return _transformed(self, image, target)

    def _pixels(self) -> np.ndarray:
        return self.data

    def _targets(self, indices: np.ndarray) -> list[Any]:
        return [self.targets[i] for i in indices]


class FakeData:
    """Random images, as ``torchvision.datasets.FakeData``: item ``i`` is the same on every read
    (seeded by ``random_offset + i``); images are RGB/L PIL images of ``image_size`` (C, H, W)."""

    def __init__(self, size: int = 1000, image_size: tuple[int, int, int] = (3, 224, 224),
                 num_classes: int = 10, transform: Callable[[Any], Any] | None = None,
                 target_transform: Callable[[Any], Any] | None = None,
                 random_offset: int = 0) -> None:
        self.size, self.image_size, self.num_classes = size, tuple(image_size), num_classes
        self.transform, self.target_transform = transform, target_transform
        self.random_offset = random_offset

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        """``(image, target)``; ``IndexError`` past the end."""
        if not 0 <= index < self.size:
            raise IndexError(f"FakeData index {index} out of range for size {self.size}")
        rng = np.random.default_rng(index + self.random_offset)
        channels, height, width = self.image_size
        pixels = rng.integers(0, 256, (height, width, channels), dtype=np.uint8)
        image = _pil_image(pixels[:, :, 0] if channels == 1 else pixels)
        target = int(rng.integers(0, self.num_classes))
        return _transformed(self, image, target)
