"""The surface rows that changed, used as a PopXL program uses them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops
from xlgraph.ops.collectives import CommGroup, CommGroupType
from xlgraph.random_seed import MAX_UINT64, two_uint32_to_uint64, uint64_to_two_uint32
from xlgraph.utils import host_pow2scale_cast_from_fp8, host_pow2scale_cast_to_fp8, to_numpy


def test_dtype_as_dtype_is_a_classmethod() -> None:
    assert popxl.dtype.as_dtype(np.float32) is popxl.float32
    assert popxl.dtype.as_dtype(np.dtype("int8")) is popxl.int8
    with pytest.raises(TypeError):
        popxl.dtype.as_dtype(object)


def test_utils_reaches_the_fp8_host_helpers() -> None:
    pytest.importorskip("ml_dtypes")
    x = np.random.default_rng(0).normal(size=16).astype(np.float32)
    f8 = host_pow2scale_cast_to_fp8(x, popxl.float8_143, 2)
    back = host_pow2scale_cast_from_fp8(f8, popxl.float8_143, -2)
    np.testing.assert_allclose(back, x, rtol=2 ** -3)
    assert to_numpy([1.0, 2.0]).dtype == np.float32


def test_seed_words_round_trip_up_to_max_uint64() -> None:
    for key in (0, 1, (1 << 32) + 5, MAX_UINT64):
        hi, lo = uint64_to_two_uint32(key)
        assert two_uint32_to_uint64(hi, lo) == key
    with pytest.raises(ValueError, match="MAX_UINT64"):
        uint64_to_two_uint32(MAX_UINT64 + 1)


def test_tensor_strides_are_numpy_strides() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(np.zeros((2, 3, 4), np.float16))
    assert t.strides() == np.zeros((2, 3, 4), np.float16).strides  # a tuple, as PopXL
    assert t.strides((6, 4)) == (8, 2)


def test_dot_checkpoint_options_as_popxl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """POPART_DOT_CHECKS present (even empty): only the named checks, case-insensitively; a
    file per graph with ops, ``<check>_<graph>.dot`` (the main graph's id is empty)."""
    monkeypatch.setenv("POPART_DOT_CHECKS", "")
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32))
        ops.call(ir.create_graph(lambda t: t * 2.0, x), x)
    assert ir.dot_checkpoint("Fwd0", tmp_path) is None and not list(tmp_path.iterdir())
    assert ir._pb_ir.getSessionOptions().logDir == str(tmp_path)
    monkeypatch.setenv("POPART_DOT_CHECKS", "FOO:fwd0")
    path = ir.dot_checkpoint("Fwd0")
    assert path == tmp_path / "Fwd0_.dot" and "digraph" in path.read_text()
    assert (tmp_path / "Fwd0_0.dot").exists()  # the subgraph "<lambda>_subgraph(0)"
    ir.dot_checkpoint("foo")
    assert (tmp_path / "foo_.dot").exists() and not (tmp_path / "Bar_.dot").exists()
    popxl.Session(ir)  # FINAL is not enabled: no file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Fwd0_.dot", "Fwd0_0.dot",
                                                         "foo_.dot", "foo_0.dot"]


def test_first_dot_checkpoint_switches_all_on(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """No POPART_DOT_CHECKS and no dotChecks: the first checkpoint enables ALL, so later ones
    and the Session's "Final" write too, into the save_dir given first."""
    monkeypatch.delenv("POPART_DOT_CHECKS", raising=False)
    ir = popxl.Ir()
    with ir.main_graph:
        popxl.variable(np.ones(2, np.float32)) + 1.0
    ir.dot_checkpoint("Foo", tmp_path / "out")
    ir.dot_checkpoint("Bar")
    assert ir._pb_ir.getSessionOptions().dotChecks == ["ALL"]
    popxl.Session(ir, "ipu_model")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["Bar_.dot", "Final_.dot",
                                                                   "Foo_.dot"]
    plain = popxl.Ir()
    with plain.main_graph:
        popxl.variable(np.ones(2, np.float32)) + 1.0
    plain._pb_ir.getSessionOptions().logDir = str(tmp_path / "quiet")
    popxl.Session(plain)  # no checkpoint asked for: no Final file
    assert not (tmp_path / "quiet").exists()


def test_pow_and_greater_take_popxl_keywords() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.array([1.0, 2.0, 3.0], np.float32))
        y = ops.pow(t=x, e=2.0)
        z = ops.greater(input=y, other=x)
        outs = [popxl.d2h_stream(v.shape, v.dtype) for v in (y, z)]
        for s, v in zip(outs, (y, z)):
            ops.host_store(s, v)
    with popxl.Session(ir) as session:
        got = session.run()
    np.testing.assert_array_equal(got[outs[0]], [1.0, 4.0, 9.0])
    np.testing.assert_array_equal(got[outs[1]], [False, True, True])


def test_remote_buffer_validates_tensors() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        buffer = popxl.RemoteBuffer((2, 3), popxl.float32, 2)
        good = popxl.variable(np.zeros((2, 3), np.float32))
        buffer.validate_tensor_matches_buffer(good)
        with pytest.raises(ValueError, match="does not match"):
            buffer.validate_tensor_matches_buffer(popxl.variable(np.zeros(6, np.float16)))
        buffer.set_remote_buffer_info(popxl.float32, (3,), 4)
        buffer.validate_tensor_matches_buffer(popxl.variable(np.zeros((2, 3), np.float32)), 2)
        assert buffer.entries == 4


def test_replica_grouping_is_const_and_comm_groups() -> None:
    ir = popxl.Ir(replication=8)
    assert ir.replica_grouping(stride=2, group_size=4).is_const
    assert not ir.replica_grouping_from_assignments([0, 1, 1, 0, 2, 3, 3, 2]).is_const
    consecutive = CommGroup(CommGroupType.Consecutive, 4).to_replica_grouping(8)
    assert consecutive == ir.replica_grouping(group_size=4)
    orthogonal = CommGroup(CommGroupType.Orthogonal, 2).to_replica_grouping(8)
    assert orthogonal.groups[0] == (0, 2, 4, 6)
    assert CommGroup(CommGroupType.Ungrouped).to_replica_grouping(8).group_size == 1


def test_in_sync_with_ipu_and_location_info() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.ones(2, np.float32), name="w")
        ops.var_updates.accumulate_(w, popxl.constant(np.ones(2, np.float32)))
        buffer = popxl.remote_buffer((2,), popxl.float32, 1)
        r = popxl.remote_variable(np.zeros(2, np.float32), buffer)
    assert r.location_info.storage is popxl.TensorStorage.OffChip
    assert w.location_info == popxl.TensorLocation()
    session = popxl.Session(ir)
    assert w.in_sync_with_ipu
    with session:
        session.run_with_outputs()  # PopXL's defaults: no inputs, outputs dropped
        assert not w.in_sync_with_ipu
        session.weights_to_host()
        assert w.in_sync_with_ipu
    assert session.get_tensor_data(w).tolist() == [2.0, 2.0]
