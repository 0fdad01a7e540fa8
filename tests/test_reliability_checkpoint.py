"""Regression tests: checkpoints never lose or silently change data (issue 9, items 4 and 5)."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import checkpoint, ops
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


# -- issue 22, items 8 and 9 and the .npy item ------------------------------------------------
def _replicated_session() -> tuple[popxl.Session, dict[str, popxl.Variable]]:
    """Four replicas; variables of every kind: one value for all, one per group of two (stride
    2), one per replica, and all_replicas retrieval of a shared and of a grouped value."""
    ir = popxl.Ir(replication=4)
    pairs = ir.replica_grouping(stride=2, group_size=2)
    single = ir.replica_grouping(group_size=1)
    with ir.main_graph:
        v = {
            "shared": popxl.variable(np.arange(3, dtype=np.float32), name="shared"),
            "pairs": popxl.variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="pairs",
                                    replica_grouping=pairs),
            "single": popxl.variable(np.arange(12, dtype=np.float32).reshape(4, 3),
                                     name="single", replica_grouping=single),
            "all": popxl.variable(np.ones(3, np.float32), name="all",
                                  retrieval_mode="all_replicas"),
            "all_pairs": popxl.variable(np.arange(6, dtype=np.float32).reshape(2, 3),
                                        name="all_pairs", replica_grouping=pairs,
                                        retrieval_mode="all_replicas"),
        }
        for t in v.values():  # one more on every replica per run
            ops.var_updates.accumulate_(t, popxl.constant(np.ones(3, np.float32)))
    return popxl.Session(ir), v


def test_every_replicated_variable_kind_round_trips_through_a_checkpoint(tmp_path) -> None:
    session, v = _replicated_session()
    with session:
        session.run({})
    before = {name: session.get_tensor_data(t) for name, t in v.items()}
    assert before["all"].shape == (4, 3) and before["all_pairs"].shape == (4, 3)
    checkpoint.save(tmp_path / "r.npz", session)
    fresh, w = _replicated_session()
    assert checkpoint.load_into(fresh, tmp_path / "r.npz") == list(v)
    for name, t in w.items():
        np.testing.assert_array_equal(fresh.get_tensor_data(t), before[name], err_msg=name)
    with fresh:  # the device sees the loaded values: one more step adds one everywhere
        fresh.run({})
    for name, t in w.items():
        np.testing.assert_array_equal(fresh.get_tensor_data(t), before[name] + 1, err_msg=name)


def test_write_variable_data_takes_shape_on_host_and_refuses_all_replicas_groups() -> None:
    """PopXL: data of ``shape_on_host`` only; an ``all_replicas`` variable whose groups hold
    several replicas raises NotImplementedError (checkpoints still load it, above)."""
    session, v = _replicated_session()
    for name in ("shared", "pairs", "single"):
        data = session.get_tensor_data(v[name]) * 3 + 1
        session.write_variable_data(v[name], data)
        np.testing.assert_array_equal(session.get_tensor_data(v[name]), data, err_msg=name)
    with pytest.raises(ShapeError, match=r"takes host data of shape \(3,\)"):
        session.write_variable_data(v["all"], np.zeros((4, 3), np.float32))
    for name in ("all", "all_pairs"):
        with pytest.raises(NotImplementedError):
            session.write_variable_data(v[name], np.zeros(v[name].shape_on_host, np.float32))


def test_save_writes_through_a_symlink(tmp_path) -> None:
    real = tmp_path / "real.npz"
    checkpoint.save(real, {"w": np.zeros(2)})
    link = tmp_path / "link.npz"
    link.symlink_to(real)
    checkpoint.save(link, {"w": np.ones(2)})
    assert link.is_symlink() and os.readlink(link) == str(real)
    np.testing.assert_array_equal(checkpoint.load(real)["w"], np.ones(2))


def test_save_refuses_a_read_only_file(tmp_path) -> None:
    path = tmp_path / "ro.npz"
    checkpoint.save(path, {"w": np.zeros(2)})
    path.chmod(0o444)
    with pytest.raises(CheckpointError, match="ro.npz is read-only; nothing was written"):
        checkpoint.save(path, {"w": np.ones(2)})
    np.testing.assert_array_equal(checkpoint.load(path)["w"], np.zeros(2))
    assert stat.S_IMODE(path.stat().st_mode) == 0o444


def test_save_refuses_names_that_collide_as_strings(tmp_path) -> None:
    with pytest.raises(CheckpointError, match=r"entries 1 and '1' both become the name '1'"):
        checkpoint.save(tmp_path / "c.npz", {1: np.zeros(2), "1": np.ones(2)})
    assert not (tmp_path / "c.npz").exists()


def test_save_syncs_the_file_before_the_rename_and_the_directory_after(tmp_path,
                                                                        monkeypatch) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync file")
        real_fsync(fd)

    def replace(src, dst) -> None:
        events.append("rename")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    checkpoint.save(tmp_path / "s.npz", {"w": np.zeros(2)})
    assert events == ["fsync file", "rename", "fsync dir"]


@pytest.mark.parametrize("path", ["", b""])
def test_save_refuses_an_empty_path(tmp_path, monkeypatch, path) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckpointError, match="the path is empty"):
        checkpoint.save(path, {"w": np.zeros(2)})
    assert list(tmp_path.iterdir()) == []  # no ./.npz


def test_save_refuses_a_directory(tmp_path) -> None:
    (tmp_path / "d.npz").mkdir()
    with pytest.raises(CheckpointError, match="is a directory"):
        checkpoint.save(tmp_path / "d.npz", {"w": np.zeros(2)})
