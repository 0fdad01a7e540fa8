"""``xlgraph.vision``: torchvision's MNIST/FashionMNIST datasets and transforms."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from xlgraph.datasets import FASHION_MNIST_CLASSES, write_idx
from xlgraph.vision import batching, datasets, transforms

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


# -- torchvision's transforms PopTorch tutorials reach for -----------------------------------------
@pytest.mark.parametrize("shape, size, antialias", [
    ((3, 32, 32), 128, True),         # the mixed-precision tutorial's CIFAR-10 upscale
    ((3, 37, 50), 20, True),          # shrink: the smaller edge becomes 20, aspect kept
    ((2, 1, 28, 28), (10, 7), True),  # a batch, explicit (h, w)
    ((3, 37, 50), 20, False),
    ((3, 9, 13), (20, 31), False),
])
def test_resize_tensors_match_torch_bilinear_interpolation(shape, size, antialias):
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
    out = transforms.Resize(size, antialias=antialias)(x)
    batch = x if x.dim() == 4 else x[None]
    expected = torch.nn.functional.interpolate(batch, size=tuple(out.shape[-2:]),
                                               mode="bilinear", align_corners=False,
                                               antialias=antialias)
    torch.testing.assert_close(out, expected if x.dim() == 4 else expected[0], rtol=1e-5,
                               atol=2e-5)
    if isinstance(size, int):
        h, w = shape[-2:]
        short = min(out.shape[-2:])
        assert short == size and out.shape[-1] == (size if w <= h else int(size * w / h))


def test_resize_uint8_and_pil_follow_torchvision():
    torch = pytest.importorskip("torch")
    image_module = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(1)
    pixels = rng.integers(0, 256, (3, 40, 30)).astype(np.uint8)
    out = transforms.Resize(16)(torch.from_numpy(pixels))
    expected = torch.nn.functional.interpolate(torch.from_numpy(pixels)[None].float(),
                                               size=(21, 16), mode="bilinear", antialias=True)
    assert out.dtype == torch.uint8 and tuple(out.shape) == (3, 21, 16)
    assert (out.int() - expected[0].round().int()).abs().max() <= 1
    pil = image_module.fromarray(pixels.transpose(1, 2, 0))
    resized = transforms.Resize(16)(pil)
    assert resized.size == (16, 21)  # PIL's (width, height): the smaller edge is 16
    np.testing.assert_array_equal(np.asarray(resized),
                                  np.asarray(pil.resize((16, 21), image_module.BILINEAR)))
    assert transforms.Resize(16, max_size=18)(pil).size == (13, 18)  # the long edge capped
    with pytest.raises(ValueError, match="bilinear"):
        transforms.Resize(8, interpolation="nearest")


def test_center_crop_pads_then_crops_as_torchvision():
    image = np.arange(5 * 7, dtype=np.float32).reshape(1, 5, 7)
    np.testing.assert_array_equal(transforms.CenterCrop(3)(image), image[:, 1:4, 2:5])
    padded = transforms.CenterCrop((7, 9))(image)  # larger than the image: zero border
    assert padded.shape == (1, 7, 9) and padded[0, 0].sum() == 0
    np.testing.assert_array_equal(padded[:, 1:6, 1:8], image)


def test_random_horizontal_flip_lambda_and_pil_to_tensor():
    torch = pytest.importorskip("torch")
    image = torch.arange(6.0).view(1, 2, 3)
    torch.testing.assert_close(transforms.RandomHorizontalFlip(1.0)(image), image.flip(-1))
    torch.testing.assert_close(transforms.RandomHorizontalFlip(0.0)(image), image)
    assert transforms.Lambda(lambda t: t * 2)(3) == 6
    with pytest.raises(TypeError, match="callable"):
        transforms.Lambda(3)
    pil = pytest.importorskip("PIL.Image").fromarray(np.full((2, 3, 3), 7, np.uint8))
    tensor = transforms.PILToTensor()(pil)
    assert tensor.dtype == torch.uint8 and tuple(tensor.shape) == (3, 2, 3)


def test_convert_image_dtype_rescales_as_torchvision_documents():
    torch = pytest.importorskip("torch")
    pixels = torch.tensor([0, 1, 128, 255], dtype=torch.uint8)
    half = transforms.ConvertImageDtype(torch.half)(pixels)
    assert half.dtype == torch.half
    torch.testing.assert_close(half, (pixels.float() / 255).half())
    back = transforms.ConvertImageDtype(torch.uint8)(torch.tensor([0.0, 0.5, 1.0]))
    assert back.tolist() == [0, int(0.5 * (256 - 1e-3)), 255]
    wide = transforms.ConvertImageDtype(torch.int32)(pixels)
    assert wide.tolist() == [v * 2 ** 23 for v in pixels.tolist()]  # (2**31) // 256
    narrow = transforms.convert_image_dtype(np.array([0, 65535, 300], np.uint16), np.uint8)
    assert narrow.tolist() == [0, 255, 1]
    with pytest.raises(RuntimeError, match="safely"):
        transforms.ConvertImageDtype(torch.int64)(torch.zeros(2))


def test_cifar10_reads_torchvisions_batches_and_the_tutorial_pipeline(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("PIL")
    import pickle

    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(2)
    data = rng.integers(0, 256, (4, 3 * 32 * 32)).astype(np.uint8)
    with open(folder / "test_batch", "wb") as f:
        pickle.dump({"data": data, "labels": [3, 1, 4, 1]}, f)
    pipeline = transforms.Compose([
        transforms.Resize(64), transforms.ToTensor(),
        transforms.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
        transforms.ConvertImageDtype(torch.half)])
    dataset = datasets.CIFAR10(str(tmp_path), train=False, transform=pipeline)
    image, label = dataset[2]
    assert len(dataset) == 4 and label == 4 and dataset.class_to_idx["cat"] == 3
    assert image.dtype == torch.half and tuple(image.shape) == (3, 64, 64)
    raw = datasets.CIFAR10(str(tmp_path), train=False)[0][0]
    np.testing.assert_array_equal(np.asarray(raw), data[0].reshape(3, 32, 32).transpose(1, 2, 0))
    with pytest.raises(RuntimeError, match="data_batch_1 is missing"):
        datasets.CIFAR10(str(tmp_path), train=True)


def test_fake_data_is_deterministic_per_index():
    pytest.importorskip("PIL")
    data = datasets.FakeData(size=5, image_size=(1, 8, 6), num_classes=3,
                             transform=transforms.ToTensor())
    (a, la), (b, lb) = data[1], data[1]
    assert tuple(a.shape) == (1, 8, 6) and la == lb and 0 <= la < 3
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(IndexError):
        data[5]


# -- whole batches at once ---------------------------------------------------------------------
def _pipelines(torch):
    t = transforms
    yield [t.ToTensor()]
    yield [t.ToTensor(), t.Normalize((0.5,), (0.5,))]
    yield [t.Compose([t.ToTensor()]), t.Normalize((0.1307,), (0.3081,), inplace=True)]
    if torch is not None:
        yield [t.PILToTensor(), t.ConvertImageDtype(torch.float32), t.Normalize((0.2,), (0.7,))]


@pytest.mark.parametrize("channels", [None, 3])
def test_batched_transforms_equal_the_per_image_results_bit_for_bit(channels):
    torch = pytest.importorskip("torch")
    image_module = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(3)
    shape = (9, 28, 28) if channels is None else (9, 32, 32, channels)
    pixels = rng.integers(0, 256, shape).astype(np.uint8)
    for steps in _pipelines(torch):
        if channels:  # one mean and std per channel
            steps = [s if type(s) is not transforms.Normalize else
                     transforms.Normalize(list(rng.random(channels)),
                                          list(rng.random(channels) + 0.1)) for s in steps]
        pipeline = transforms.Compose(steps)
        batch = batching.batched(pipeline)(pixels)
        each = torch.stack([pipeline(image_module.fromarray(p)) for p in pixels])
        assert batch.dtype == each.dtype and batch.shape == each.shape
        assert torch.equal(batch, each), steps
    pipeline = transforms.ToTensor()  # other dtypes: no table, the steps on the whole batch
    floats = pixels / np.float32(7)
    assert torch.equal(batching.batched(pipeline)(floats),
                       torch.stack([pipeline(p) for p in floats]))


def test_steps_without_a_batch_form_fall_back_to_per_image():
    torch = pytest.importorskip("torch")

    class Shifted(transforms.Normalize):
        pass

    t = transforms
    for pipeline in (None, t.Compose([]), t.Resize(14), t.Normalize((0.5,), (0.5,)),
                     t.Compose([t.ToTensor(), t.Lambda(lambda x: x)]),
                     t.Compose([t.ToTensor(), t.RandomHorizontalFlip()]),
                     t.Compose([t.ToTensor(), Shifted((0.5,), (0.5,))]),
                     t.Compose([t.ToTensor(), t.ToTensor()])):
        assert batching.batched(pipeline) is None
    assert batching.batched(t.ConvertImageDtype(torch.float32)) is None  # not raw pixels first


def test_getitems_equals_the_items_one_by_one(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("PIL")
    _write(tmp_path, "FashionMNIST", n=20)
    indices = [3, 0, 19, 3, -1, 7]
    pipelines = (transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.5,), (0.5,))]),
                 transforms.Compose([transforms.ToTensor(), transforms.Lambda(lambda x: x * 2)]))
    for transform in pipelines:
        data = datasets.FashionMNIST(str(tmp_path), transform=transform,
                                     target_transform=lambda y: y + 10)
        got, expected = data.__getitems__(indices), [data[i] for i in indices]
        assert len(got) == len(expected)
        for (image, target), (image_1, target_1) in zip(got, expected):
            assert torch.equal(image, image_1) and target == target_1
            assert type(target) is type(target_1) is int


def test_torch_loader_batches_are_those_of_the_per_item_path(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("PIL")
    _write(tmp_path, "MNIST", n=50)
    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1,), (0.3,))])

    class PerItem(datasets.MNIST):
        __getitems__ = None  # torch's loader then reads item by item

    def epoch(cls):
        torch.manual_seed(5)
        data = cls(str(tmp_path), transform=transform)
        return list(torch.utils.data.DataLoader(data, batch_size=8, shuffle=True))

    fast, slow = epoch(datasets.MNIST), epoch(PerItem)
    assert len(fast) == len(slow) == 7
    for (x, y), (x_1, y_1) in zip(fast, slow):
        assert torch.equal(x, x_1) and torch.equal(y, y_1) and y.dtype == torch.int64


def test_cifar10_getitems_batches_rgb_images(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("PIL")
    import pickle

    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    data = np.random.default_rng(4).integers(0, 256, (5, 3 * 32 * 32)).astype(np.uint8)
    with open(folder / "test_batch", "wb") as f:
        pickle.dump({"data": data, "labels": [3, 1, 4, 1, 5]}, f)
    transform = transforms.Compose([transforms.ToTensor(),
                                    transforms.Normalize((0.4, 0.5, 0.6), (0.2, 0.3, 0.25))])
    dataset = datasets.CIFAR10(str(tmp_path), train=False, transform=transform)
    for (image, label), (image_1, label_1) in zip(dataset.__getitems__([4, 0, 2]),
                                                  [dataset[i] for i in (4, 0, 2)]):
        assert torch.equal(image, image_1) and label == label_1
