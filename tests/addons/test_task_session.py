"""``popxl_addons.task_session.TaskSession``: the checkpoint folder, session_info.json,
resuming, and the data loader contract."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

import xlgraph as popxl
import xlgraph.addons as addons
from xlgraph import ops
from xlgraph.addons.task_session import initialise_memmap_dir_from_checkpoint


class Loader:
    def __init__(self):
        self.position = 0

    def __iter__(self):
        for i in range(100):
            self.position = i + 1
            yield (np.full((2,), i, np.float32),)

    def save(self, filename):
        with open(filename, "w") as f:
            f.write(str(self.position))

    def resume(self, filename):
        with open(filename) as f:
            self.position = int(f.read())


def make_session(tmp_path=None):
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():  # PopXL: the store must follow the update
        ins = addons.InputStreams(x=((2,), popxl.float32))
        w = popxl.variable(np.zeros(2, np.float32), name="w")
        sub = popxl.variable(np.ones(3, np.float32), name="layer.b")
        ops.scaled_add_(w, ops.host_load(ins.x), b=1.0)
        outs = addons.OutputStreams(w=((2,), popxl.float32))
        ops.host_store(outs.w, w)
    state = addons.NamedTensors.from_dict({"w": w, "layer.b": sub})
    return addons.TaskSession(ins, outs, state, 2, ir, "cpu")


def test_checkpoint_layout_and_resume(tmp_path):
    s = make_session()
    s.dataloader = Loader()
    s.add_session_state_info({"epoch": 1})
    with s:
        for _ in range(3):
            s.run()
        assert s.session_state == {"steps": 3, "epoch": 1}
        s.save_checkpoint(tmp_path / "c1")
    c1 = tmp_path / "c1"
    assert sorted(p.name for p in (c1 / "model").iterdir()) == ["layer.b.npz", "w.npz"]
    with np.load(c1 / "model" / "w.npz") as npz:
        assert npz.files == ["w"] and npz["w"].tolist() == [3.0, 3.0]  # 0 + 1 + 2
    assert json.loads((c1 / "session_info.json").read_text()) == {"steps": 3, "epoch": 1}
    assert (c1 / "dataloader.bin").read_text() == "3"

    t = make_session()
    t.dataloader = Loader()
    t.load_checkpoint(c1)
    assert t.session_state == {"steps": 3, "epoch": 1} and t.dataloader.position == 3
    np.testing.assert_array_equal(t.get_named_tensors_data().w, [3.0, 3.0])
    (c1 / "session_info.json").unlink()
    t.load_checkpoint(c1)
    assert t.session_state == {"steps": 0}


def test_only_the_newest_checkpoints_of_this_session_are_kept(tmp_path):
    s = make_session()
    (tmp_path / "other").mkdir()
    for name in ("a", "b", "c"):
        s.save_checkpoint(tmp_path / name)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b", "c", "other"]


def test_missing_tensors_are_reported_as_asked(tmp_path, caplog):
    s = make_session()
    s.save_checkpoint(tmp_path / "c")
    (tmp_path / "c" / "model" / "w.npz").unlink()
    t = make_session()
    t.load_checkpoint(tmp_path / "c", report_missing="none")
    with caplog.at_level(logging.WARNING, logger="popxl_addons"):
        t.load_checkpoint(tmp_path / "c")
    assert "state keys not in checkpoint: {'w'}" in caplog.text
    with pytest.raises(ValueError, match=r"state keys not in checkpoint: \{'w'\}"):
        t.load_checkpoint(tmp_path / "c", report_missing="error")
    np.save(tmp_path / "c" / "model" / "w.npy", np.zeros(2))  # not a .npz: not compared
    (tmp_path / "c" / "model" / "extra.npz").write_bytes(b"")
    t.session_state["lr"] = 0.1
    with pytest.raises(ValueError, match=r"Checkpoint keys not in state: \{'extra'\}\n"
                                         r"state keys not in checkpoint: \{'w'\}"):
        t.load_checkpoint(tmp_path / "c", report_missing="error")
    (tmp_path / "c" / "model" / "extra.npz").unlink()
    np.savez(tmp_path / "c" / "model" / "w.npz", w=np.zeros(2))
    with pytest.raises(ValueError, match=r"state keys not in checkpoint: \{'lr'\}"):
        t.load_checkpoint(tmp_path / "c", report_missing="error")
    with pytest.raises(ValueError, match="report_missing"):
        t.load_checkpoint(tmp_path / "c", report_missing="loud")


def test_dataloader_contract_and_wandb(caplog, tmp_path):
    s = make_session()
    with caplog.at_level(logging.WARNING, logger="popxl_addons"):
        assert s.dataloader is None
    assert "not set" in caplog.text
    with pytest.raises(ValueError, match="save"):
        s.dataloader = [1, 2]
    with pytest.raises(NotImplementedError, match="Weights & Biases"):
        s.save_checkpoint("wandb://run")
    with pytest.raises(TypeError):
        s.add_session_state_info({"bad": object()})


def test_memmap_data_is_copied_raw_and_restored(tmp_path):
    ir = popxl.Ir()
    with ir.main_graph:
        f = addons.VariableFactory(lambda: np.arange(4, dtype=np.float32))
        v = f.create_tensor("m", memmap_dir=tmp_path / "mm")
    s = addons.TaskSession([], [], addons.NamedTensors(m=v), 1, ir, "cpu")
    s.save_checkpoint(tmp_path / "ck")
    assert (tmp_path / "ck" / "model" / "m.npy").exists()
    initialise_memmap_dir_from_checkpoint(tmp_path / "ck", tmp_path / "restored")
    restored = np.fromfile(tmp_path / "restored" / "m.npy", np.float32)
    np.testing.assert_array_equal(restored, np.arange(4))
