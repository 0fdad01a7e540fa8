"""popxl-addons' ``memmap_dir``: ``init`` and ``init_remote`` keep each variable's host data in
``<memmap_dir>/<name>.npy`` (``Variable._memmap_arr``), made from the factory when absent and
reused, values and all, when present; updates come back into the maps."""

from __future__ import annotations

from functools import partial

import numpy as np

import xlgraph as popxl
import xlgraph.addons as addons
from xlgraph import ops
from xlgraph.addons import remote
from xlgraph.addons.task_session import initialise_memmap_dir_from_checkpoint


def _factories() -> addons.NamedVariableFactories:
    return addons.NamedVariableFactories.from_dict({
        "w": addons.VariableFactory(partial(np.arange, 4, dtype=np.float32)),
        "b": addons.VariableFactory(partial(np.ones, (2,), np.float32))})


def _remote_step(folder, replicas: int, read_only: bool = False):
    """Every variable in a remote buffer mapped from ``folder``; the program doubles ``w``
    (sharded over the replicas) unless ``read_only``."""
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        facts = _factories()
        buffers = addons.named_variable_buffers(facts, shard_over_dict={"b": 1})
        variables = facts.init_remote(buffers, memmap_dir=folder,
                                      read_only_if_exists=read_only)
        loaded = remote.load_remote(buffers, 0)
        if not read_only:
            doubled = loaded.copy()
            doubled.insert("w", loaded.w * 2.0, overwrite=True)
            remote.store_remote(buffers, doubled, 0)
    return ir, variables


def test_init_remote_maps_every_variable_and_the_updates_come_back(tmp_path):
    ir, variables = _remote_step(tmp_path, replicas=2)
    assert variables.w._memmap_arr.filename == tmp_path / "w.npy"
    with popxl.Session(ir) as session:
        session.run()
    assert np.fromfile(tmp_path / "w.npy", np.float32).tolist() == [0.0, 2.0, 4.0, 6.0]
    assert np.fromfile(tmp_path / "b.npy", np.float32).tolist() == [1.0, 1.0]
    # a second program reuses the maps and their values (not the factories' data)
    ir, variables = _remote_step(tmp_path, replicas=2)
    assert variables.w._memmap_arr.tolist() == [0.0, 2.0, 4.0, 6.0]
    with popxl.Session(ir) as session:
        session.run()
        assert session.get_tensor_data(variables.w).tolist() == [0.0, 4.0, 8.0, 12.0]


def test_init_remote_reuses_maps_read_only(tmp_path):
    _remote_step(tmp_path, replicas=1)
    ir, variables = _remote_step(tmp_path, replicas=1, read_only=True)
    assert variables.w._memmap_arr.mode == "r"
    with popxl.Session(ir) as session:
        session.run()
        assert session.get_tensor_data(variables.w).tolist() == [0.0, 1.0, 2.0, 3.0]
    assert not session.is_attached


def test_init_maps_variables_of_a_module(tmp_path):
    class Scale(addons.Module):
        def build(self, x):
            w = self.add_variable_input("w", partial(np.full, (2,), 3.0, np.float32),
                                        by_ref=True)
            return x * ops.var_updates.accumulate_(w, x)

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32), name="x")
        facts, graph = Scale().create_graph(x)
        variables = facts.init(prefix="layer", memmap_dir=tmp_path)
        graph.bind(variables).call(x)
    assert variables.w._memmap_arr.filename == tmp_path / "layer.w.npy"
    with popxl.Session(ir) as session:
        session.run()
    assert np.fromfile(tmp_path / "layer.w.npy", np.float32).tolist() == [4.0, 4.0]


def test_a_map_restored_from_a_checkpoint_replaces_the_older_one(tmp_path):
    """``initialise_memmap_dir_from_checkpoint`` over a folder that held a map of another
    shape: the restored map is used (the older map's recorded spec goes with it)."""
    def program(shape, folder):
        ir = popxl.Ir()
        with ir.main_graph:
            f = addons.VariableFactory(partial(np.arange, np.prod(shape), dtype=np.float32))
            v = f.create_tensor("m", memmap_dir=folder)
        return ir, v

    ir, v = program((6,), tmp_path / "ck_maps")
    session = addons.TaskSession([], [], addons.NamedTensors(m=v), 1, ir, "cpu")
    session.save_checkpoint(tmp_path / "ck")
    program((3,), tmp_path / "maps")  # an earlier, smaller map
    initialise_memmap_dir_from_checkpoint(tmp_path / "ck", tmp_path / "maps")
    _, v = program((6,), tmp_path / "maps")
    assert v._memmap_arr.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
