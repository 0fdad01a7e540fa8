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


_NO_COPY = "When passing a memory-mapped NumPy array, "


def test_memmaps_that_would_need_a_copy_are_refused_as_in_popxl(tmp_path) -> None:
    """PopXL keeps a map only as it is: another dtype, a Fortran-ordered map or a 64-bit map
    (which PopXL would downcast) is a ValueError starting with PopXL's sentence, for remote
    variables too; ``downcast=False`` keeps a float64 map."""
    f32 = _map(tmp_path, "a.bin", np.ones((2, 3), np.float32))
    fortran = np.memmap(tmp_path / "f.bin", np.float32, "w+", shape=(2, 3), order="F")
    f64 = _map(tmp_path, "d.bin", np.ones(2, np.float64))
    ir = popxl.Ir()
    with ir.main_graph:
        cases = [
            (lambda: popxl.variable(f32, popxl.float16),
             "the `dtype` parameter must be None or the same as the array's dtype"),
            (lambda: popxl.variable(fortran), "it must already be in C-ordered and aligned form."),
            (lambda: popxl.variable(f64), "the dtype None is not supported, as it requires "
                                          "downcasting"),
            (lambda: popxl.variable(f64, popxl.float64),
             f"the dtype {popxl.float64} is not supported, as it requires downcasting"),
            (lambda: popxl.remote_variable(f32, popxl.remote_buffer((2, 3), popxl.float16, 1)),
             "the `dtype` parameter must be None"),
        ]
        for make, message in cases:
            with pytest.raises(ValueError) as info:
                make()
            assert str(info.value).startswith(_NO_COPY + message)
        kept = popxl.variable(f64, downcast=False, name="kept")
        plain = popxl.variable(np.ones(2, np.float32), name="plain")
    assert kept.dtype == popxl.float64 and kept._memmap_arr is f64
    assert plain._memmap_arr is None


class _Counted(np.memmap):
    """A map that counts its flushes (a user's subclass of np.memmap)."""

    flushes = 0

    def flush(self) -> None:
        type(self).flushes += 1
        super().flush()


def test_weights_to_host_flushes_every_map(tmp_path) -> None:
    """PopXL's weights_to_host writes the device values into the maps and flushes them;
    leaving the Session does the same."""
    mm = _Counted(tmp_path / "w.bin", np.float32, "w+", shape=(3,))
    mm[:] = 1.0
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(mm, name="w")
        ops.var_updates.accumulate_(w, popxl.constant(np.ones(3, np.float32)))
    session = popxl.Session(ir)
    with session:
        session.run()
        before = _Counted.flushes
        session.weights_to_host()
        assert _Counted.flushes == before + 1 and mm.tolist() == [2.0] * 3
        session.run()
    assert _Counted.flushes == before + 2
    assert np.fromfile(tmp_path / "w.bin", np.float32).tolist() == [3.0] * 3


def test_a_read_only_map_turns_weights_to_host_off(tmp_path, popart_records) -> None:
    """PopXL: a read-only map marks the Ir; its Session does not write weights back on exit
    (logging why) and refuses an explicit weights_to_host; running works, and after the
    Session the map still holds the file's values."""
    _map(tmp_path, "w.bin", np.full(2, 4.0, np.float32)).flush()
    mm = np.memmap(tmp_path / "w.bin", np.float32, "r", shape=(2,))
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(mm, name="w")
        y = popxl.d2h_stream((2,), popxl.float32, "y")
        ops.host_store(y, w * 2.0)
    assert ir._has_read_only_memmap
    session = popxl.Session(ir)
    assert not session.weights_to_host_on_exit
    [record] = popart_records
    assert record.levelname == "INFO" and "read-only memmap" in record.getMessage()
    with session:
        assert session.run()[y].tolist() == [8.0, 8.0]
        with pytest.raises(Exception) as info:
            session.weights_to_host()
        assert str(info.value).startswith("Writing data from device to host is not possible "
                                          "as the `ir` contains a read-only memmap.")
    assert session.get_tensor_data(w) is mm and mm.tolist() == [4.0, 4.0]


def test_a_memmap_with_a_non_const_grouping_is_copied_with_a_warning(tmp_path,
                                                                      popart_records) -> None:
    """PopXL re-orders the data of a grouping no stride describes, so it copies the map,
    warning once per variable through PopART's logger; the variable then runs normally and
    its values do not come back into the map."""
    mm = _map(tmp_path, "g.bin", np.array([[1.0], [5.0]], np.float32))
    ir = popxl.Ir(replication=4)
    groups = ir.replica_grouping_from_assignments([0, 1, 1, 0])
    with ir.main_graph:
        g = popxl.variable(mm, name="g", replica_grouping=groups)
        ops.var_updates.accumulate_(g, popxl.constant(np.ones(1, np.float32)))
    [record] = popart_records
    assert record.levelname == "WARNING"
    assert "you have passed np.memmap data and a non-const replica grouping" in \
        record.getMessage()
    assert g._memmap_arr is None
    with popxl.Session(ir) as session:
        session.run()
    assert session.get_tensor_data(g).tolist() == [[2.0], [6.0]]
    assert mm.tolist() == [[1.0], [5.0]]


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
