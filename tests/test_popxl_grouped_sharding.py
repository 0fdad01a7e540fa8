"""PopXL's ``ReplicaGrouping`` (defaults, ``const_rg``, ``_to_variable_settings``) and grouped,
replica-sharded remote variables, written as PopXL programs write them. Expected values are
numpy, from PopXL's semantics: each group holds its own value, split over the members of its
shard group in member order."""

from __future__ import annotations

import math

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops


def _groupings(n: int) -> list[tuple[int, int]]:
    """Every (stride, group_size) PopXL accepts on ``n`` replicas, each grouping once."""
    seen, out = set(), []
    for stride in (s for s in range(1, n + 1) if n % s == 0):
        for size in (g for g in range(1, n + 1) if n % (g * stride) == 0):
            key = tuple(popxl.Ir(replication=n).replica_grouping(stride, size).assignment)
            if key not in seen:
                seen.add(key)
                out.append((stride, size))
    return out


def test_default_group_size_is_replicas_over_stride() -> None:
    ir = popxl.Ir(replication=8)
    rg = ir.replica_grouping(stride=4)
    assert rg.group_size == 2 and rg.num_groups == 4
    assert rg.assignment == [0, 1, 2, 3, 0, 1, 2, 3]
    assert ir.replica_grouping().assignment == [0] * 8
    assert ir.replica_grouping(stride=2, group_size=1).stride == 1  # a group of one: stride 1


@pytest.mark.parametrize("stride, group_size, match", [
    (0, None, "Stride must be"), (3, None, "Stride must be"), (16, None, "Stride must be"),
    (1, 0, "Group size must be"), (1, 9, "Group size must be"), (2, 3, "divide")])
def test_replica_grouping_checks(stride, group_size, match) -> None:
    with pytest.raises(ValueError, match=match):
        popxl.Ir(replication=8).replica_grouping(stride, group_size)


def test_replica_grouping_is_made_by_the_ir_only() -> None:
    with pytest.raises(RuntimeError, match="ir.replica_grouping"):
        popxl.ReplicaGrouping()


def test_const_rg_and_maps() -> None:
    ir = popxl.Ir(replication=8)
    rg = ir.replica_grouping(stride=2, group_size=2)
    assert rg.const_rg is rg and rg.to_device_map is None and rg.to_host_map is None
    nc = ir.replica_grouping_from_assignments([0, 0, 1, 1, 0, 0, 1, 1])
    assert nc.const_rg.assignment == [0, 0, 1, 1, 2, 2, 3, 3]
    assert nc.const_rg.group_size == 2 and nc.const_rg.stride == 1
    assert nc.to_device_map == [0, 1, 0, 1] and nc.to_host_map == [0, 1]
    spread = ir.replica_grouping_from_assignments([0, 1, 1, 0, 0, 1, 1, 0])
    assert spread.const_rg.assignment == list(range(8))  # no coarser constant refinement
    assert spread.to_device_map == [0, 1, 1, 0, 0, 1, 1, 0] and spread.to_host_map == [0, 1]


@pytest.mark.parametrize("n", [2, 4, 8])
def test_variable_settings_groups(n) -> None:
    ir = popxl.Ir(replication=n)
    for stride, size in _groupings(n):
        rg = ir.replica_grouping(stride, size)
        groups = rg._to_variable_settings("all_replicas").groups(n)
        expected = [[r for r in range(n) if rg.assignment[r] == g] for g in range(rg.num_groups)]
        assert groups == expected
        assert rg._to_variable_settings().getGroupCount(n) == rg.num_groups
    settings = ir.replica_grouping(2, n // 2)._to_variable_settings()
    assert settings.getRetrievalMode().name == "OnePerGroup"
    with pytest.raises(ValueError, match="Invalid retrieval_mode: each"):
        ir.replica_grouping()._to_variable_settings("each")


def test_variable_settings_example() -> None:
    rg = popxl.Ir(replication=4).replica_grouping(stride=2, group_size=2)
    assert rg._to_variable_settings("all_replicas").groups(4) == [[0, 2], [1, 3]]


def test_non_const_grouped_variable_holds_each_groups_value() -> None:
    ir = popxl.Ir(replication=8)
    rg = ir.replica_grouping_from_assignments([0, 0, 1, 1, 0, 0, 1, 1])
    data = np.array([[1.0, 2.0], [10.0, 20.0]], np.float32)
    with ir.main_graph:
        v = popxl.variable(data, name="v", replica_grouping=rg)
        s = popxl.d2h_stream(v.shape, v.dtype, "v")
        ops.host_store(s, v + 0.0)
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run()[s]
        np.testing.assert_array_equal(out, data[rg.assignment])
        np.testing.assert_array_equal(session.get_tensor_data(v), data)


def _grouped_sharded_run(n: int, stride: int, size: int, shard_over: int) -> None:
    ir = popxl.Ir(replication=n)
    rg = ir.replica_grouping(stride, size)
    per_group = (3, 2)
    shape = (rg.num_groups, *per_group) if rg.num_groups > 1 else per_group
    data = np.arange(math.prod(shape), dtype=np.float32).reshape(shape) - 5
    with ir.main_graph, popxl.in_sequence():
        v, shard = popxl.replica_sharded_variable(data, popxl.float32, "v", replica_grouping=rg,
                                                  shard_over=shard_over)
        gather_group = ir.replica_grouping(rg.const_rg.stride, shard_over)
        full = ops.collectives.replicated_all_gather(shard, group=gather_group)
        s = popxl.d2h_stream(full.shape, full.dtype, "full")
        ops.host_store(s, full)
        ops.var_updates.accumulate_(shard, popxl.constant(1.0))
    assert shard.shape == (math.ceil(6 / shard_over),) and shard.meta_shape == per_group
    assert full.shape == per_group and v.shape == per_group and v.shape_on_host == data.shape
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run()[s]
        values = data if rg.num_groups > 1 else data[None]
        np.testing.assert_array_equal(out, values[rg.assignment], err_msg=f"{rg}")
        np.testing.assert_array_equal(session.get_tensor_data(v), data + 1)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_grouped_sharded_variables_hold_each_groups_value(n) -> None:
    """Every grouping of ``n`` replicas, every shard count dividing its group size: replica r
    gathers its group's value, and reading the variable gives one value per group."""
    for stride, size in _groupings(n):
        for shard_over in (k for k in range(1, size + 1) if size % k == 0 and n > 1):
            _grouped_sharded_run(n, stride, size, shard_over)


def test_grouped_sharded_buffer_example() -> None:
    """R = 8, grouping (stride 2, size 4): 2 groups, data (2, 16): entries (4,), meta (16,)."""
    ir = popxl.Ir(replication=8)
    rg = ir.replica_grouping(stride=2, group_size=4)
    with ir.main_graph:
        buffer = popxl.replica_sharded_buffer((2, 16), popxl.float32, rg)
        assert buffer.tensor_shape == (4,) and buffer.meta_shape == (16,)
        with pytest.raises(ValueError):
            popxl.replica_sharded_buffer((2, 16), popxl.float32, rg, shard_over=8)
        with pytest.raises(ValueError):
            popxl.replica_sharded_buffer((2, 16), popxl.float32, rg, shard_over=3)
        other = popxl.replica_sharded_buffer((8,), popxl.float32)
        with pytest.raises(ValueError, match=r"Cannot use RemoteBuffer\[id="):
            popxl.remote_replica_sharded_variable(np.zeros((2, 16), np.float32), other, 0,
                                                  replica_grouping=rg)


def test_grouped_sharded_variable_on_a_plain_buffer() -> None:
    """Buffers made as ``(data.size // replication_factor,)`` take grouped data."""
    ir = popxl.Ir(replication=8)
    rg = ir.replica_grouping(stride=2, group_size=4)
    data = np.arange(32, dtype=np.float32).reshape(2, 16)
    with ir.main_graph:
        buffer = popxl.remote_buffer((data.size // 8,), popxl.float32, 1)
        v = popxl.remote_replica_sharded_variable(data, buffer, 0, replica_grouping=rg)
        shard = ops.remote_load(buffer, 0)
        full = ops.collectives.replicated_all_gather(shard, group=rg.const_rg)
        s = popxl.d2h_stream(full.shape, full.dtype, "full")
        ops.host_store(s, full)
    assert buffer.meta_shape == (16,) and shard.shape == (4,) and full.shape == (16,)
    with popxl.Session(ir, "ipu_model") as session:
        np.testing.assert_array_equal(session.run()[s], data[rg.assignment])
        np.testing.assert_array_equal(session.get_tensor_data(v), data)


def test_remote_variable_takes_the_entry_shape() -> None:
    """A one-group variable of data (1, 1) in a buffer of (1,) entries loads as (1,)."""
    ir = popxl.Ir()
    with ir.main_graph:
        buffer = popxl.remote_buffer((1,), popxl.float32, 1)
        v = popxl.remote_variable(np.array([[3.0]], np.float32), buffer, 0)
        x = ops.remote_load(buffer, 0)
        s = popxl.d2h_stream(x.shape, x.dtype, "x")
        ops.host_store(s, x * 2.0)
    assert x.shape == (1,)
    with popxl.Session(ir, "ipu_model") as session:
        np.testing.assert_array_equal(session.run()[s], [6.0])
        np.testing.assert_array_equal(session.get_tensor_data(v), [[3.0]])


@pytest.mark.parametrize("dtype", ["float8_143", "float8_152"])
def test_grouped_float8_shards(dtype) -> None:
    """float8 data (scaled by ``log2_scale``) sharded per group: the gathered shards and
    ``get_tensor_data`` give the host cast's bytes (NaN compares as the same byte)."""
    pytest.importorskip("ml_dtypes", reason="the fp8 extra is not installed")
    from xlgraph.fp8_utils import host_pow2scale_cast_to_fp8

    f8 = getattr(popxl, dtype)
    ir = popxl.Ir(replication=4)
    rg = ir.replica_grouping(stride=2, group_size=2)
    data = np.random.default_rng(0).normal(size=(2, 5, 3)).astype(np.float32) * 100
    data[0, 0, 0] = 1e9  # overflows to NaN
    with ir.main_graph:
        v, shard = popxl.replica_sharded_variable(data, f8, "v", replica_grouping=rg,
                                                  log2_scale=-2)
        whole = ops.collectives.replicated_all_gather(shard, group=rg)
        s = popxl.d2h_stream(whole.shape, whole.dtype, "whole")
        ops.host_store(s, whole)
    assert shard.shape == (8,) and shard.meta_shape == (5, 3) and whole.dtype is f8
    want = host_pow2scale_cast_to_fp8(data, f8, -2).view(np.uint8)
    with popxl.Session(ir, "ipu_model") as session:
        np.testing.assert_array_equal(session.run()[s].view(np.uint8), want[rg.assignment])
        np.testing.assert_array_equal(session.get_tensor_data(v).view(np.uint8), want)
