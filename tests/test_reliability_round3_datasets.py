"""Damaged ``.gz`` files in the dataset cache are fetched again; unknown names are listed
(issue 36, D9 and D17).

Before the fixes, a truncated cached ``.gz`` raised ``ValueError: corrupt gzip data`` before the
checksum step, even with ``download=True`` and a working mirror (0 fetches), and
``python -m xlgraph.datasets fetch`` (the suggested fix) failed the same way; ``fetch("cifar")``
raised a bare ``KeyError: 'cifar'``.
"""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import numpy as np
import pytest

from xlgraph import datasets as ds
from xlgraph.datasets import catalog, sources, store
from xlgraph.datasets.__main__ import main as fetch_command
from xlgraph.datasets.idx import idx_bytes

_NAME = "t10k-images-idx3-ubyte"


@pytest.fixture
def mirror(tmp_path: Path, monkeypatch) -> tuple[dict[str, np.ndarray], list[str]]:
    """A synthetic MNIST whose digests stand in for the known ones, served by a fake mirror;
    the cache holds all four files, the t10k images as a truncated ``.gz``."""
    rng = np.random.default_rng(0)
    arrays = {"train-images-idx3-ubyte": rng.integers(0, 256, (6, 28, 28), dtype=np.uint8),
              "train-labels-idx1-ubyte": rng.integers(0, 10, 6, dtype=np.uint8),
              _NAME: rng.integers(0, 256, (40, 28, 28), dtype=np.uint8),
              "t10k-labels-idx1-ubyte": rng.integers(0, 10, 40, dtype=np.uint8)}
    monkeypatch.setattr(catalog, "MNIST_SHA256", {
        name: hashlib.sha256(idx_bytes(a)).hexdigest() for name, a in arrays.items()})
    monkeypatch.delenv(store.VERIFY_ENV, raising=False)
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name, a in arrays.items():
        if name != _NAME:
            (raw / name).write_bytes(idx_bytes(a))
    (raw / f"{_NAME}.gz").write_bytes(gzip.compress(idx_bytes(arrays[_NAME]))[:5000])
    urls: list[str] = []

    def serve(url: str, output: Path, name: str) -> None:
        urls.append(url)
        output.write_bytes(gzip.compress(idx_bytes(arrays[name])))

    monkeypatch.setattr(sources, "_http_get", serve)
    return arrays, urls


def test_a_truncated_gz_is_fetched_again_with_download(tmp_path: Path, mirror, capsys) -> None:
    pytest.importorskip("pooch")
    arrays, urls = mirror
    images, _ = ds.load_mnist(tmp_path, train=False, download=True)
    np.testing.assert_array_equal(images, arrays[_NAME])
    assert len(urls) == 1 and urls[0].endswith(f"/{_NAME}.gz")  # only the damaged file
    err = capsys.readouterr().err
    assert f"{_NAME}.gz is damaged (corrupt gzip data); fetching it again" in err
    ds.load_mnist(tmp_path, train=False, download=False)  # the fresh copy is used from now on


def test_without_download_a_truncated_gz_names_the_refetch_command(tmp_path: Path,
                                                                   mirror) -> None:
    with pytest.raises(ds.ChecksumError, match=rf"{_NAME}\.gz: corrupt gzip data .*damaged.* "
                                               rf"python -m xlgraph\.datasets fetch mnist "
                                               rf"--data-dir {tmp_path}"):
        ds.load_mnist(tmp_path, train=False, download=False)


def test_the_fetch_command_replaces_a_truncated_gz(tmp_path: Path, mirror, capsys) -> None:
    pytest.importorskip("pooch")
    arrays, urls = mirror
    assert fetch_command(["fetch", "mnist", "--data-dir", str(tmp_path)]) == 0
    assert len(urls) == 1 and "SHA-256 verified" in capsys.readouterr().out
    images, _ = ds.load_mnist(tmp_path, train=False, download=False)
    np.testing.assert_array_equal(images, arrays[_NAME])


def test_an_unknown_dataset_name_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match=r"unknown dataset 'cifar'; the known datasets are "
                                       r"'mnist', 'fashion-mnist'"):
        ds.fetch("cifar")
