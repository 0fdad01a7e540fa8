"""TaskSession checkpoints, session state and data loaders; checkpoint names (issue 36: D3,
D12-D16, D23, and the widened round-trip guard).

Before the fixes: one folder spelled two ways lost its only checkpoint (D3); numpy values in the
session state came back as strings (D12); ``max_checkpoints="2"`` failed mid-save (D13); a
corrupt session info file gave a bare ``JSONDecodeError`` after the weights were loaded
(D14); extra batch arrays were dropped (D15); an empty loader raised a bare ``StopIteration``
(D16); the names ``"x"`` and ``"x\\0"`` became one entry (D23).
"""

from __future__ import annotations

import functools
import math
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import xlgraph as popxl
from xlgraph import addons, checkpoint, ops
from xlgraph.errors import ArgumentError, CheckpointError, StreamInputError


def _task_session(w: float = 0.0, max_checkpoints: object = 1) -> addons.TaskSession:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream((2,), popxl.float32, "x")
        v = popxl.variable(np.full(2, w, np.float32), name="w")
        out = popxl.d2h_stream((2,), popxl.float32, "y")
        ops.host_store(out, ops.host_load(x) + v)
    state = addons.NamedTensors.from_dict({"w": v})
    return addons.TaskSession([x], [out], state, max_checkpoints, ir, "cpu")


def _w(session: addons.TaskSession) -> list[float]:
    return session.get_named_tensors_data().to_dict()["w"].tolist()


# -- D3: one folder, two spellings ----------------------------------------------------------------
def test_one_folder_spelled_two_ways_keeps_its_checkpoint(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    os.symlink(tmp_path / "ckpt", tmp_path / "link")
    session = _task_session(3.0, max_checkpoints=1)
    for spelling in ("ckpt", tmp_path / "ckpt", "sub/../ckpt", "link", "./ckpt/"):
        session.save_checkpoint(spelling)
        assert sorted(os.listdir(tmp_path / "ckpt")) == ["model", "session_info.json"]
    other = _task_session(0.0)
    other.load_checkpoint("ckpt")
    assert _w(other) == [3.0, 3.0]
    # a second folder still replaces the first, as max_checkpoints=1 asks
    session.save_checkpoint("second")
    assert not (tmp_path / "ckpt").exists()
    assert sorted(os.listdir(tmp_path / "second")) == ["model", "session_info.json"]


# -- D12: numpy values keep their types -----------------------------------------------------------
def test_numpy_state_values_come_back_with_their_types(tmp_path: Path) -> None:
    session = _task_session()
    session.add_session_state_info({"steps": np.int64(100), "lr": np.float32(0.1),
                                    "arr": np.arange(2), "shape": (2, 3)})
    session.save_checkpoint(tmp_path)
    other = _task_session()
    other.load_checkpoint(tmp_path)
    got = other.session_state
    assert type(got["steps"]) is np.int64 and got["steps"] == 100
    assert type(got["lr"]) is np.float32 and got["lr"] == np.float32(0.1)
    assert got["arr"].dtype == np.arange(2).dtype and got["arr"].tolist() == [0, 1]
    assert got["shape"] == (2, 3)


def test_state_values_json_cannot_hold_are_refused_before_anything_is_written(tmp_path) -> None:
    session = _task_session()
    with pytest.raises(TypeError, match=r"session_state\['when'\] is a object; .*\[at "):
        session.add_session_state_info({"when": object()})
    with pytest.raises(TypeError, match=r"key 1 is a int; session state keys are strings"):
        session.add_session_state_info({"m": {1: 2}})
    session.session_state["c"] = np.array([1j])  # written directly, found at save
    with pytest.raises(TypeError, match=r"session_state\['c'\] is a numpy complex128 value; "
                                        r".*nothing was written"):
        session.save_checkpoint(tmp_path / "c")
    assert not (tmp_path / "c").exists()


# -- D13: max_checkpoints -------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["2", 0, -1, 2.5, True, None])
def test_max_checkpoints_must_be_a_whole_number(bad: object) -> None:
    with pytest.raises(ArgumentError, match=r"TaskSession max_checkpoints must be a whole number "
                                            r">= 1, got .*\[at test_reliability_round3_sess"):
        _task_session(max_checkpoints=bad)
    session = _task_session()
    with pytest.raises(ArgumentError, match="max_checkpoints"):
        session.max_checkpoints = bad
    assert session.max_checkpoints == 1


# -- D14: a corrupt session_info.json -------------------------------------------------------------
@pytest.mark.parametrize("text", ["{bad json", "[1, 2]", "\xff\xfe", '{"a": {"__xlgraph__": 1}}'])
def test_a_corrupt_state_file_is_named_and_nothing_is_loaded(tmp_path: Path, text: str) -> None:
    _task_session(5.0).save_checkpoint(tmp_path)
    (tmp_path / "session_info.json").write_bytes(text.encode("latin-1"))
    other = _task_session(0.0)
    other.add_session_state_info({"steps": 1})
    with pytest.raises(CheckpointError, match=r"session_info\.json .*nothing was loaded"):
        other.load_checkpoint(tmp_path)
    assert _w(other) == [0.0, 0.0] and other.session_state == {"steps": 1}


class Loader:
    """A data loader as TaskSession.dataloader takes it: iterable, with save and resume."""

    def __init__(self, batches):
        self.batches = batches

    def __iter__(self):
        return iter(self.batches)

    def save(self, filename):
        pass

    def resume(self, filename):
        pass


# -- D15, D16: batches from the dataloader --------------------------------------------------------
def test_a_batch_with_a_wrong_number_of_arrays_is_refused() -> None:
    session = _task_session()
    ones = np.ones(2, np.float32)
    for batch, n in (((ones, ones, ones), 3), ((), 0)):
        session.dataloader = Loader([batch])
        with session, pytest.raises(StreamInputError, match=rf"holds {n} arrays for 1 input "
                                                            r"streams \['x'\]"):
            session.run()
    session.dataloader = Loader([(ones,)])
    with session:
        assert session.run()[session.outputs[0]].tolist() == [1.0, 1.0]


def test_an_empty_or_used_up_loader_raises_a_clear_error() -> None:
    session = _task_session()

    def steps():
        while True:
            yield session.run()

    ones = np.ones(2, np.float32)
    with session:
        session.dataloader = Loader([])
        with pytest.raises(StreamInputError, match="the dataloader gave no batch: it is empty"):
            session.run()
        session.dataloader = Loader(iter([(ones,)]))  # a one-shot iterator: one epoch only
        session.run()
        with pytest.raises(StreamInputError, match=r"cannot start a new epoch \(Loader\)"):
            next(steps())  # was RuntimeError: generator raised StopIteration


# -- D23: checkpoint names ------------------------------------------------------------------------
def test_names_that_differ_by_a_trailing_nul_stay_apart(tmp_path: Path) -> None:
    path = tmp_path / "m.npz"
    checkpoint.save(path, {"x": [1.0], "x\0": [2.0], "trailing\0": [3.0]})
    got = checkpoint.load(path)
    assert list(got) == ["x", "x\0", "trailing\0"]
    assert [a.tolist() for a in got.values()] == [[1.0], [2.0], [3.0]]


def test_files_with_the_earlier_name_list_still_load(tmp_path: Path) -> None:
    path = tmp_path / "old.npz"
    np.savez(path, np.ones(1), np.zeros(2), __names__=np.array(["a", "b/c"], dtype=str))
    assert {k: v.shape for k, v in checkpoint.load(path).items()} == {"a": (1,), "b/c": (2,)}


# -- the widened guard: every state type and every name round-trips -------------------------------
def _same(a: object, b: object) -> bool:
    """Equal values of one type; arrays by dtype, shape and values; NaN equals NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray | np.generic):
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.dtype.kind != "f":
            return np.array_equal(a, b)
        numbers = ~np.isnan(a)  # NaN loads back as NaN; its sign and payload are not kept
        return (np.array_equal(np.isnan(a), np.isnan(b)) and np.array_equal(a[numbers], b[numbers])
                and np.array_equal(np.signbit(a[numbers]), np.signbit(b[numbers])))
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) ==
                                                      math.copysign(1, b))
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return a == b


_DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
           np.uint64, np.float16, np.float32, np.float64]
_text = st.text(st.characters(min_codepoint=0, blacklist_categories=()), max_size=6)
_numpy_scalars = st.sampled_from(_DTYPES).flatmap(lambda d: hnp.from_dtype(np.dtype(d)).map(
    lambda v, d=d: np.dtype(d).type(v)))
_numpy_arrays = hnp.arrays(st.sampled_from(_DTYPES), hnp.array_shapes(min_dims=0, max_dims=2,
                                                                         min_side=0, max_side=3))
_leaves = (st.none() | st.booleans() | st.integers() | st.floats() | _text | _numpy_scalars
           | _numpy_arrays)
_keys = _text.filter(lambda k: k != "__xlgraph__")
_state = st.dictionaries(_keys, st.recursive(
    _leaves, lambda inner: (st.lists(inner, max_size=3) | st.tuples(inner, inner)
                            | st.dictionaries(_keys, inner, max_size=3)),
    max_leaves=8), max_size=4)


@functools.cache
def _pair() -> tuple[addons.TaskSession, addons.TaskSession]:
    return _task_session(1.0), _task_session(0.0)


@settings(max_examples=60, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@example({"steps": np.int64(100), "lr": np.float32(0.1), "arr": np.arange(2)})
@example({"t": (1, (2.0, [np.float64(-0.0)])), "x\0": "\ud800", "nan": float("nan")})
@given(_state)
def test_every_session_state_type_round_trips(info: dict) -> None:
    writer, reader = _pair()
    writer.session_state = {}
    writer.add_session_state_info(info)
    reader.session_state = {}
    with tempfile.TemporaryDirectory() as d:
        writer.save_checkpoint(d)
        reader.load_checkpoint(d)
    assert _same(reader.session_state, info), (reader.session_state, info)


@settings(max_examples=60, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])  # a loaded machine draws slowly
@example(["x", "x\0", "trailing\0", "", "__names__", "__name_list__", "arr_0", "\ud800"])
@given(st.lists(_text, unique=True, max_size=6))
def test_every_checkpoint_name_round_trips(names: list[str]) -> None:
    entries = {name: np.full(2, i, np.float32) for i, name in enumerate(names)}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "names.npz")
        checkpoint.save(path, entries)
        got = checkpoint.load(path)
    assert list(got) == names
    assert all(np.array_equal(got[n], entries[n]) for n in names)
