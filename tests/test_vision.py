"""``xlgraph.vision``: torchvision's MNIST/FashionMNIST datasets and transforms."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from xlgraph.datasets import FASHION_MNIST_CLASSES, write_idx
from xlgraph.vision import datasets, transforms

pytestmark = pytest.mark.usefixtures("unverified_data")


def _write(root, folder: str, n: int = 6) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (n, 28, 28)).astype(np.uint8)
    labels = rng.integers(0, 10, n).astype(np.uint8)
    raw = root / folder / "raw"
    raw.mkdir(parents=True)
    for split in ("train", "t10k"):
        write_idx(raw / f"{split}-images-idx3-ubyte", images)
        write_idx(raw / f"{split}-labels-idx1-ubyte", labels)
    return images, labels


def test_fashion_mnist_items_and_attributes(tmp_path):
    images, labels = _write(tmp_path, "FashionMNIST")
    data = datasets.FashionMNIST(str(tmp_path), train=False, download=False,
                                 target_transform=lambda t: t + 100)
    assert len(data) == 6 and data.classes == list(FASHION_MNIST_CLASSES)
    assert data.raw_folder == str(tmp_path / "FashionMNIST" / "raw")
    image, target = data[2]
    assert target == int(labels[2]) + 100
    np.testing.assert_array_equal(np.asarray(image), images[2])
    assert getattr(image, "mode", "L") == "L"
    assert data.class_to_idx["Trouser"] == 1


def test_missing_files_say_how_to_get_them(tmp_path):
    with pytest.raises(RuntimeError, match="Dataset not found.*download=True"):
        datasets.MNIST(str(tmp_path), train=True, download=False)


def test_to_tensor_and_normalize_match_torchvision_formulas(tmp_path):
    images, _ = _write(tmp_path, "MNIST")
    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,),
                                                                                (0.3081,))])
    x, _ = datasets.MNIST(str(tmp_path), transform=transform)[0]
    expected = (images[0].astype(np.float32) / 255 - np.float32(0.1307)) / np.float32(0.3081)
    assert tuple(x.shape) == (1, 28, 28)
    np.testing.assert_allclose(np.asarray(x)[0], expected, rtol=1e-6, atol=1e-6)
    rgb = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    chw = np.asarray(transforms.ToTensor()(rgb))
    np.testing.assert_array_equal(chw, rgb.transpose(2, 0, 1) / np.float32(255))
    with pytest.raises(ValueError, match="zero"):
        transforms.Normalize((0.5,), (0.0,))


def test_to_pil_image_round_trips_a_tensor():
    pytest.importorskip("PIL")
    pixels = np.random.default_rng(1).integers(0, 256, (28, 28)).astype(np.uint8)
    tensor = transforms.ToTensor()(pixels)
    image = transforms.ToPILImage()(tensor)
    assert image.mode == "L" and image.size == (28, 28)
    np.testing.assert_array_equal(np.asarray(image), pixels)


def test_to_tensor_gives_torch_tensors_when_torch_is_installed():
    torch = pytest.importorskip("torch")
    assert isinstance(transforms.ToTensor()(np.zeros((2, 2), np.uint8)), torch.Tensor)


def test_vision_works_without_torch(tmp_path):
    _write(tmp_path, "MNIST")
    code = (f"import sys; sys.modules['torch'] = None\n"
            f"from xlgraph.vision import datasets, transforms\n"
            f"t = transforms.Compose([transforms.ToTensor(), "
            f"transforms.Normalize((0.5,), (0.5,))])\n"
            f"x, y = datasets.MNIST({str(tmp_path)!r}, transform=t)[1]\n"
            f"print(type(x).__module__, x.dtype, x.shape, type(y).__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["numpy", "float32", "(1,", "28,", "28)", "int"]
