"""Memory-mapped variables lose nothing (issue 43: R3, R4, R5).

One rule, in docs/popxl-compat.md: a map is written back only when the program wrote its
variable; a read-only map is never written; an existing map is reused only when its shape and
dtype match. Before the fix an inference Session wrote its stale copy over another Session's
training at exit (R3), a map of another shape or dtype was reused as it was (R4), and every
Session over a read-only map failed at exit with a bare ``ValueError`` and stayed attached (R5).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import addons, ops
from xlgraph.errors import MemmapError


def _program(folder, train: bool, read_only: bool = False, fill: float = 1.0):
    """``y = x * w`` with ``w`` mapped from ``folder/w.npy``; ``train`` adds 1 to ``w``."""
    ir = popxl.Ir()
    with ir.main_graph:
        factory = addons.VariableFactory(lambda: np.full((4,), fill, np.float32), name="w")
        w = factory.create_tensor(memmap_dir=folder, read_only_if_exists=read_only)
        x = popxl.h2d_stream((4,), popxl.float32, "x")
        y = popxl.d2h_stream((4,), popxl.float32, "y")
        ops.host_store(y, ops.host_load(x) * w)
        if train:
            ops.scaled_add_(w, popxl.constant(np.ones(4, np.float32)))
    return ir, x, y, w


def _file(folder) -> list[float]:
    return np.fromfile(folder / "w.npy", np.float32).tolist()


ONES = np.ones(4, np.float32)
_HERE = f"[at {Path(__file__).name}:"  # the user's line in errors


@pytest.mark.parametrize("optimize", [True, False])
def test_an_inference_session_keeps_the_training_another_session_saved(tmp_path, optimize):
    """R3: the evaluator never writes ``w``, so leaving it does not undo the trainer's steps."""
    train_ir, tx, _, tw = _program(tmp_path, train=True)
    eval_ir, ex, ey, _ = _program(tmp_path, train=False)
    trainer = popxl.Session(train_ir, optimize=optimize)
    evaluator = popxl.Session(eval_ir, optimize=optimize)
    with evaluator:
        assert evaluator.run({ex: ONES})[ey].tolist() == [1.0] * 4
        with trainer:
            for _ in range(3):
                trainer.run({tx: ONES})
        assert _file(tmp_path) == [4.0] * 4
    assert _file(tmp_path) == [4.0] * 4
    assert trainer.get_tensor_data(tw).tolist() == [4.0] * 4


def test_a_variable_written_through_a_called_graph_still_comes_back(tmp_path):
    """R3's rule keeps every write: an update made by reference inside a repeated graph is
    written back into the map on leaving the Session."""
    ir = popxl.Ir()
    with ir.main_graph:
        w = addons.VariableFactory(lambda: np.zeros(4, np.float32), name="w").create_tensor(
            memmap_dir=tmp_path)
        body = ir.create_empty_graph("step")
        with body:
            t = popxl.graph_input((4,), popxl.float32, "t", by_ref=True)
            ops.var_updates.accumulate_(t, popxl.constant(np.ones(4, np.float32)))
        ops.repeat(body, 3, inputs_dict={body.inputs[0]: w})
    with popxl.Session(ir) as session:
        session.run()
    assert _file(tmp_path) == [3.0] * 4


@pytest.mark.parametrize("shape, dtype", [
    ((2, 4), np.float32),   # used to take a prefix of the file
    ((8, 4), np.float32),   # used to grow the file with zeros
    ((4, 4), np.float16),   # used to read float32 bytes as float16
    ((8, 4), np.float16),   # the same size as the file: only its recorded spec tells
    ((2, 8), np.float32),   # the same size and dtype, another shape
])
def test_a_map_of_another_shape_or_dtype_is_refused(tmp_path, shape, dtype):
    """R4: the error names the file, both specs and the variable; the file is left alone."""
    ir = popxl.Ir()
    with ir.main_graph:
        addons.VariableFactory(lambda: np.ones((4, 4), np.float32), name="w").create_tensor(
            memmap_dir=tmp_path)
    before = (tmp_path / "w.npy").read_bytes()
    ir = popxl.Ir()
    with ir.main_graph:
        factory = addons.VariableFactory(lambda: np.full(shape, 7, dtype), name="w")
        with pytest.raises(MemmapError) as info:
            factory.create_tensor(memmap_dir=tmp_path)
    text = str(info.value)
    want = f"{np.dtype(dtype).name}{list(shape)}"
    for part in (str(tmp_path / "w.npy"), "float32[4, 4]", want, "'w'", _HERE):
        assert part in text
    assert isinstance(info.value, ValueError)
    assert (tmp_path / "w.npy").read_bytes() == before


def test_a_matching_map_is_reused_with_its_values(tmp_path):
    """The same spec reuses the map without initialising it again (as popxl-addons)."""
    _program(tmp_path, train=False, fill=5.0)
    *_, w = _program(tmp_path, train=False, fill=9.0)
    assert w._memmap_arr.tolist() == [5.0] * 4


def test_a_raw_map_without_a_recorded_spec_is_checked_by_its_size(tmp_path):
    """Maps written elsewhere (popxl-addons, ``initialise_memmap_dir_from_checkpoint``) have
    no record of their spec: their size must be the variable's."""
    np.full(4, 3.0, np.float32).tofile(tmp_path / "w.npy")
    *_, w = _program(tmp_path, train=False)
    assert w._memmap_arr.tolist() == [3.0] * 4
    assert json.loads((tmp_path / "w.npy.json").read_text()) == {"dtype": "float32",
                                                                  "shape": [4]}
    np.full(5, 3.0, np.float32).tofile(tmp_path / "v.npy")
    with popxl.Ir().main_graph:
        factory = addons.VariableFactory(lambda: np.ones(4, np.float32), name="v")
        with pytest.raises(MemmapError, match=r"float32\[4\] \(16 bytes\).*v.npy holds 20 bytes"):
            factory.create_tensor(memmap_dir=tmp_path)


def test_read_only_maps_run_and_detach_cleanly(tmp_path):
    """R5: the second program reuses the map read-only; leaving the Session writes nothing,
    raises nothing and detaches; the value reads back from the map."""
    _program(tmp_path, train=False, read_only=True, fill=2.0)
    ir, x, y, w = _program(tmp_path, train=False, read_only=True, fill=2.0)
    assert w._memmap_arr.mode == "r"
    session = popxl.Session(ir)
    with session:
        assert session.run({x: ONES})[y].tolist() == [2.0] * 4
        assert session.get_tensor_data(w).tolist() == [2.0] * 4
        assert session.get_tensor_data(w) is w._memmap_arr
        with pytest.raises(Exception, match="read-only memmap.*'w'"):
            session.weights_to_host()
    assert not session.is_attached
    assert _file(tmp_path) == [2.0] * 4


def test_a_program_that_writes_a_read_only_map_is_told_so(tmp_path, popart_records):
    """The device trains ``w``, but its map is read-only: a warning names it, reading it while
    attached is a clear error, and the file never changes."""
    _program(tmp_path, train=False, read_only=True)
    ir, x, _, w = _program(tmp_path, train=True, read_only=True)
    session = popxl.Session(ir)
    warned = [r.getMessage() for r in popart_records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "'w'" in warned[0] and "read-only" in warned[0]
    with session:
        session.run({x: ONES})
        with pytest.raises(MemmapError, match=r"'w'.*read-only"):
            session.get_tensor_data(w)
        with pytest.raises(MemmapError, match=r"'w'.*read-only"):
            session.write_variable_data(w, np.zeros(4, np.float32))
    assert not session.is_attached
    assert _file(tmp_path) == [1.0] * 4


def test_a_failed_run_restores_a_large_read_only_map_from_its_snapshot(tmp_path, monkeypatch):
    """A large map keeps a failed run's snapshot in a file, or takes it from the map while the
    map is in sync; a read-only map written by the program never is, even after other
    variables came back."""
    monkeypatch.setattr("xlgraph.utils.SPILL_BYTES", 1)  # every memmap counts as large
    np.ones((2, 3), np.float32).tofile(tmp_path / "w.npy")
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        w = addons.VariableFactory(lambda: np.ones((2, 3), np.float32), name="w").create_tensor(
            memmap_dir=tmp_path, read_only_if_exists=True)
        other = popxl.variable(np.zeros(1, np.float32), name="other")
        labels = ops.host_load(stream := popxl.h2d_stream((2,), popxl.int32, "labels"))
        ops.scaled_add_(w, popxl.constant(np.ones((2, 3), np.float32)), b=0.5)
        ops.host_store(seen := popxl.d2h_stream((2, 3), popxl.float32, "seen"), w + 0.0)
        loss, _ = ops.nll_loss_with_softmax_grad(ops.softmax(w, axis=1), labels)
        ops.host_store(popxl.d2h_stream(loss.shape, loss.dtype, "loss"), loss)
    good, bad = np.array([0, 2], np.int32), np.array([0, 7], np.int32)  # 7 is out of range
    with popxl.Session(ir) as session:
        assert session.run({stream: good})[seen][0, 0] == 1.5
        session.get_tensor_data(other)  # the weights come back: all but the read-only map
        with pytest.raises(popxl.errors.ExecutionError, match="unchanged"):
            session.run({stream: bad})
        assert session.run({stream: good})[seen][0, 0] == 2.0
    assert np.fromfile(tmp_path / "w.npy", np.float32).tolist() == [1.0] * 6


def _remote_program(folder, train: bool):
    """``w`` in a remote buffer, its host data the map ``folder/w.npy``; ``train`` stores
    ``w + 1``."""
    ir = popxl.Ir()
    with ir.main_graph:
        buffer = popxl.remote_buffer((4,), popxl.float32, 1)
        mm = np.memmap(folder / "w.npy", np.float32, "r+", shape=(4,))
        w = popxl.remote_variable(mm, buffer, 0, name="w")
        loaded = ops.remote_load(buffer, 0)
        y = popxl.d2h_stream((4,), popxl.float32, "y")
        ops.host_store(y, loaded * 1.0)
        if train:
            ops.remote_store(buffer, 0, loaded + 1.0)
    return ir, y, w


def test_an_inference_session_keeps_the_training_of_a_remote_variable(tmp_path):
    """R3 for remote variables: only a program that stores into the variable's entry writes
    its map back; reading the evaluator's copy does not put it back into the map either."""
    np.ones(4, np.float32).tofile(tmp_path / "w.npy")
    train_ir, _, tw = _remote_program(tmp_path, train=True)
    eval_ir, ey, ew = _remote_program(tmp_path, train=False)
    trainer, evaluator = popxl.Session(train_ir), popxl.Session(eval_ir)
    with evaluator:
        assert evaluator.run()[ey].tolist() == [1.0] * 4
        with trainer:
            trainer.run()
            trainer.run()
        assert evaluator.get_tensor_data(ew) is ew._memmap_arr
        assert _file(tmp_path) == [3.0] * 4
    assert _file(tmp_path) == [3.0] * 4
    assert trainer.get_tensor_data(tw).tolist() == [3.0] * 4
