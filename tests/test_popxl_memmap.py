"""PopXL's memory-mapped variables: ``np.memmap`` data is accepted wherever PopXL takes array data
(``variable``, ``remote_variable``, ``replica_sharded_variable``, replica-grouped variables), the
map is the variable's host buffer (``weights_to_host``, ``get_tensor_data`` and
``write_variables_data`` go through it in place), and no full host copy is kept, so a variable as
large as the memory still runs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops
from xlgraph.errors import ExecutionError
from xlgraph.runtime import host_maps


def _map(tmp_path: Path, name: str, data: np.ndarray) -> np.memmap:
    mm = np.memmap(tmp_path / name, data.dtype, "w+", shape=data.shape)
    mm[:] = data
    return mm


def test_get_tensor_data_returns_the_map_itself_and_writes_go_through_it(tmp_path) -> None:
    """PopXL: ``get_tensor_data`` of a memmapped variable is the memmap, updated in place;
    ``write_variable_data`` writes into the memmap (no host copy of its own)."""
    mm = _map(tmp_path, "w.bin", np.ones((2, 3), np.float32))
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(mm, name="w")
        ops.var_updates.accumulate_(w, popxl.constant(np.full((2, 3), 2.0, np.float32)))
    session = popxl.Session(ir)
    assert session.get_tensor_data(w) is mm
    with session:
        session.run()
        got = session.get_tensor_data(w)  # stale host: one weights_to_host, into the map
        assert got is mm
        np.testing.assert_array_equal(mm, 3.0)
        session.write_variable_data(w, np.zeros((2, 3), np.float32))
        np.testing.assert_array_equal(mm, 0.0)  # the write went into the map
        session.run()
    np.testing.assert_array_equal(np.fromfile(tmp_path / "w.bin", np.float32), 2.0)


def test_memmaps_of_remote_sharded_and_grouped_variables_come_back_through_the_map(
        tmp_path) -> None:
    """PopXL accepts memmaps for remote, replica-sharded and replica-grouped variables; their
    values come back into the maps (``weights_to_host`` on leaving the session)."""
    ir = popxl.Ir(replication=2)
    remote_mm = _map(tmp_path, "r.bin", np.array([1.0, 2.0], np.float32))
    sharded_mm = _map(tmp_path, "s.bin", np.arange(4, dtype=np.float32))
    grouped_mm = _map(tmp_path, "g.bin", np.array([[1.0], [5.0]], np.float32))
    with ir.main_graph:
        buffer = popxl.remote_buffer((2,), popxl.float32, 1)
        remote = popxl.remote_variable(remote_mm, buffer, 0, name="remote")
        ops.remote_store(buffer, 0, ops.remote_load(buffer, 0) * 2.0)
        sharded, shard = popxl.replica_sharded_variable(sharded_mm, name="sharded")
        shard = ops.var_updates.accumulate_(shard, popxl.constant(np.ones(2, np.float32)))
        ops.remote_store(sharded.remote.buffer, 0, shard)
        grouped = popxl.variable(grouped_mm, name="grouped",
                                 replica_grouping=ir.replica_grouping(group_size=1))
        ops.var_updates.accumulate_(grouped, popxl.constant(np.ones(1, np.float32)))
    assert (remote.host_memmap, sharded.host_memmap, grouped.host_memmap) == (
        remote_mm, sharded_mm, grouped_mm)
    with popxl.Session(ir) as session:
        session.run()
    np.testing.assert_array_equal(remote_mm, [2.0, 4.0])
    np.testing.assert_array_equal(sharded_mm, [1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(grouped_mm, [[2.0], [6.0]])
    session.write_variables_data({remote: np.zeros(2, np.float32),
                                  grouped: np.zeros((2, 1), np.float32)})
    np.testing.assert_array_equal(remote_mm, 0.0)
    np.testing.assert_array_equal(grouped_mm, 0.0)


def test_a_memmap_of_another_dtype_is_copied_and_left_alone(tmp_path) -> None:
    """PopXL downcasts float64 data to float32: a float64 memmap becomes a float32 copy, and
    the map is not written back (its dtype differs)."""
    mm = _map(tmp_path, "d.bin", np.ones(2, np.float64))
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(mm, name="w")
        ops.var_updates.accumulate_(w, popxl.constant(np.ones(2, np.float32)))
    assert w.dtype == popxl.float32 and w.host_memmap is None
    with popxl.Session(ir) as session:
        session.run()
    np.testing.assert_array_equal(mm, 1.0)
    np.testing.assert_array_equal(session.get_tensor_data(w), 2.0)


def test_a_failed_run_leaves_a_large_memmapped_variable_unchanged(tmp_path, monkeypatch) -> None:
    """A large memmapped variable has no spare device array; its snapshot for a failed run is
    kept in a file, and a failed run still leaves it as it was."""
    monkeypatch.setattr("xlgraph.utils.SPILL_BYTES", 1)  # every memmap counts as large
    mm = _map(tmp_path, "w.bin", np.ones((2, 3), np.float32))
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        w = popxl.variable(mm, name="w")
        labels = ops.host_load(stream := popxl.h2d_stream((2,), popxl.int32, "labels"))
        ops.scaled_add_(w, popxl.constant(np.ones((2, 3), np.float32)), b=0.5)
        loss, _ = ops.nll_loss_with_softmax_grad(ops.softmax(w, axis=1), labels)
        ops.host_store(popxl.d2h_stream(loss.shape, loss.dtype, "loss"), loss)
    session = popxl.Session(ir)
    assert [type(saved) for _, saved in session._backup] == [host_maps.Spill]
    good, bad = np.array([0, 2], np.int32), np.array([0, 7], np.int32)  # 7 is out of range
    with session:
        for expected in (1.0, 1.5, 2.0):
            # the first failure restores from the map (in sync after the attach), the later
            # ones from the file (a good run left the map behind the device)
            with pytest.raises(ExecutionError, match="unchanged"):
                session.run({stream: bad})
            np.testing.assert_array_equal(session.get_tensor_data(w), expected)
            session.run({stream: good})
            with pytest.raises(ExecutionError, match="unchanged"):
                session.run({stream: bad})
    assert session.get_tensor_data(w) is mm
    np.testing.assert_array_equal(mm, 2.5)


_BIG = """
import resource, sys
import numpy as np
import xlgraph as popxl
from xlgraph import ops

path, n = sys.argv[1], int(sys.argv[2])
with open(path, "wb") as f:
    f.truncate(n * 4)  # a sparse file: no disk blocks until written
mm = np.memmap(path, np.float32, "r+", shape=(n,))
ir = popxl.Ir()
with ir.main_graph:
    w = popxl.variable(mm, name="w")
    ops.add_(w, popxl.constant(np.float32(1.5)))
with popxl.Session(ir) as session:
    session.run()
assert session.get_tensor_data(w) is mm
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def test_a_2_gib_memmapped_variable_trains_within_3_gib_resident(tmp_path) -> None:
    """PopXL's memmapped weights exist so that weights larger than the host's spare memory fit:
    a 2 GiB variable takes its device copy and little more (peak RSS of a fresh process)."""
    n = (2 << 30) // 4
    path = tmp_path / "big.bin"
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(_BIG), str(path), str(n)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    peak = int(done.stdout.split()[-1])
    assert peak < 3 << 30, f"peak resident {peak / 2**30:.2f} GiB"
    mm = np.memmap(path, np.float32, "r", shape=(n,))
    for i in (0, n // 3, n - 1):  # the update came back through the map into the file
        assert mm[i] == 1.5
