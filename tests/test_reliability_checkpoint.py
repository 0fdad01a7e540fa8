"""Regression tests: checkpoints never lose or silently change data (issue 9, items 4 and 5)."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import checkpoint
from xlgraph.errors import CheckpointError, DTypeError, ShapeError

F32 = popxl.float32


def _session(**initial: np.ndarray) -> tuple[popxl.Session, dict[str, popxl.Tensor]]:
    ir = popxl.Ir()
    with ir.main_graph:
        variables = {name: popxl.variable(value, name=name) for name, value in initial.items()}
    return popxl.Session(ir), variables


def test_a_failed_save_keeps_the_previous_file(tmp_path, monkeypatch) -> None:
    path = tmp_path / "model.npz"
    checkpoint.save(path, {"w": np.arange(3.0)})

    def disk_full(file, *args, **kwargs):
        file.write(b"PK\x03\x04 half a zip")
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(np, "savez", disk_full)
        with pytest.raises(OSError, match="No space"):
            checkpoint.save(path, {"w": np.zeros(3)})
    np.testing.assert_array_equal(checkpoint.load(path)["w"], np.arange(3.0))
    assert [p.name for p in tmp_path.iterdir()] == ["model.npz"]  # no temporary file left


def test_object_arrays_are_refused_before_writing(tmp_path) -> None:
    path = tmp_path / "model.npz"
    checkpoint.save(path, {"w": np.ones(2)})
    with pytest.raises(CheckpointError, match="'bad' holds Python objects"):
        checkpoint.save(path, {"w": np.zeros(2), "bad": np.array([{"a": 1}, None])})
    np.testing.assert_array_equal(checkpoint.load(path)["w"], np.ones(2))


def test_any_name_round_trips(tmp_path) -> None:
    names = ["file", "allow_pickle", "args", "a/b.c", "arr_0", "__names__", "", "ü"]
    values = {name: np.full(2, i, np.int16) for i, name in enumerate(names)}
    checkpoint.save(tmp_path / "m", values)  # ".npz" is appended, as numpy does
    loaded = checkpoint.load(tmp_path / "m.npz")
    assert list(loaded) == names
    for name in names:
        np.testing.assert_array_equal(loaded[name], values[name])
        assert loaded[name].dtype == np.int16


def test_files_written_by_plain_savez_still_load(tmp_path) -> None:
    np.savez(tmp_path / "old.npz", w=np.arange(4.0))
    np.testing.assert_array_equal(checkpoint.load(tmp_path / "old.npz")["w"], np.arange(4.0))


def test_load_into_checks_every_entry_before_writing() -> None:
    session, v = _session(a=np.zeros(2, np.float32), b=np.zeros(2, np.float32),
                          c=np.zeros(2, np.float32))
    bad = {"a": np.ones(2), "b": np.ones(2), "c": np.ones(3)}
    with pytest.raises(ShapeError, match=r"'c' has shape \(3,\).*nothing was loaded"):
        checkpoint.load_into(session, bad)
    for t in v.values():
        np.testing.assert_array_equal(session.get_tensor_data(t), np.zeros(2))


def test_load_into_refuses_lossy_casts_unless_asked() -> None:
    session, v = _session(n=np.zeros(3, np.int32), x=np.zeros(3, np.float32))
    data = {"n": np.array([1.9, -2.7, 3e10]), "x": np.array([0.1, 2.0, -1e-3])}
    with pytest.raises(DTypeError, match=r"'n' \(float64\).* n i32\[3\].*allow_lossy_cast"):
        checkpoint.load_into(session, data)
    np.testing.assert_array_equal(session.get_tensor_data(v["x"]), np.zeros(3))
    with pytest.raises(DTypeError, match="'x'"):  # float64 beyond float32's range
        checkpoint.load_into(session, {"n": np.arange(3), "x": np.array([1e300, 0.0, 0.0])})
    with pytest.raises(DTypeError, match="'n'"):  # int64 beyond int32's range
        checkpoint.load_into(session, {"n": np.array([2**32 + 5, 0, 0]), "x": np.zeros(3)})
    loaded = checkpoint.load_into(session, {"n": np.array([1.0, -2.0, 3.0]), "x": data["x"]})
    assert loaded == ["n", "x"]  # exact values and float rounding are fine
    np.testing.assert_array_equal(session.get_tensor_data(v["n"]), [1, -2, 3])
    np.testing.assert_array_equal(session.get_tensor_data(v["x"]), data["x"].astype(np.float32))
    checkpoint.load_into(session, data, allow_lossy_cast=True)
    np.testing.assert_array_equal(session.get_tensor_data(v["n"])[:2], [1, -2])


@pytest.mark.parametrize("content", [b"", b"not a zip file at all", b"PK\x03\x04truncated"])
def test_corrupt_files_name_the_path(tmp_path, content: bytes) -> None:
    path = tmp_path / "broken.npz"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match="broken.npz is not a readable checkpoint"):
        checkpoint.load(path)
    session, _ = _session(w=np.zeros(2, np.float32))
    with pytest.raises(CheckpointError, match="broken.npz"):
        checkpoint.load_into(session, path)
