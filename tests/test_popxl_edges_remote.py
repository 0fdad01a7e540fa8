"""PopXL's remote buffers and replicated tensor sharding at the edges: the shapes PopXL gives
sharded remote variables and their loads, data written to remote variables, and
``replicated_all_gather``'s output shapes. Expected values are numpy, from PopXL's semantics."""

from __future__ import annotations

import math

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops


def _run(ir: popxl.Ir, streams: list) -> list[np.ndarray]:
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run()
    return [out[s] for s in streams]


@pytest.mark.parametrize("n, shape", [(2, (3, 4)), (4, (5,)), (8, (2, 3))])
def test_sharded_variable_on_a_plain_buffer_takes_its_meta_shape(n, shape) -> None:
    """PopXL: remote_replica_sharded_variable on ``remote_buffer((ceil(nelms / n),), dtype)``
    sets the buffer's meta_shape to the variable's shape, so its loads carry it and
    ``replicated_all_gather`` ("auto") rebuilds the whole tensor; stores reach the variable."""
    data = np.arange(math.prod(shape), dtype=np.float32).reshape(shape) - 3
    ir = popxl.Ir(replication=n)
    with ir.main_graph:
        buffer = popxl.remote_buffer((math.ceil(data.size / n),), popxl.float32)
        v = popxl.remote_replica_sharded_variable(data, buffer, 0, name="v")
        shard = ops.remote_load(buffer, 0)
        full = ops.collectives.replicated_all_gather(shard)
        ops.remote_store(buffer, 0, ops.collectives.replica_sharded_slice(full * full))
        s = popxl.d2h_stream(full.shape, full.dtype, "full")
        ops.host_store(s, full)
    assert buffer.meta_shape == shape and buffer.tensor_shape == (math.ceil(data.size / n),)
    assert shard.meta_shape == shape and full.shape == shape and v.shape == shape
    assert v.location_info.replicated_tensor_sharding == popxl.ReplicatedTensorSharding.On
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run()[s]
        np.testing.assert_array_equal(out, np.broadcast_to(data, (n, *shape)))
        np.testing.assert_array_equal(session.get_tensor_data(v), data * data)


def test_sharded_variable_needs_replicas() -> None:
    """PopXL: remote_replica_sharded_variable raises ValueError on an Ir of one replica."""
    ir = popxl.Ir()
    with ir.main_graph, pytest.raises(ValueError, match="replica"):
        popxl.remote_replica_sharded_variable(np.zeros(4, np.float32),
                                              popxl.remote_buffer((2,), popxl.float32), 0)


def test_sharded_variable_takes_a_buffer_of_the_whole_shape() -> None:
    """PopXL never checks a plain buffer's entry shape: ``RemoteBuffer([5], ...)`` for a
    5-element variable over 2 replicas works, and loads give the 3-element shard."""
    ir = popxl.Ir(replication=2)
    data = np.arange(5, dtype=np.float32)
    with ir.main_graph:
        buffer = popxl.RemoteBuffer([5], popxl.float32, 1)
        v = popxl.remote_replica_sharded_variable(data, buffer, 0)
        shard = ops.remote_load(buffer, 0)
        full = ops.collectives.replicated_all_gather(shard)
        s = popxl.d2h_stream(full.shape, full.dtype, "full")
        ops.host_store(s, full)
    assert shard.shape == (3,) and full.shape == (5,)
    with popxl.Session(ir, "ipu_model") as session:
        np.testing.assert_array_equal(session.run()[s], np.stack([data, data]))
        np.testing.assert_array_equal(session.get_tensor_data(v), data)


@pytest.mark.parametrize("n, group_size", [(1, 1), (2, 2), (4, 2), (8, 4)])
def test_all_gather_output_shapes_as_popxl(n, group_size) -> None:
    """PopXL: output_shape "new_axis" is (group size, *t.shape), "concat" joins along ``axis``,
    "auto" is "concat" for a tensor without a meta_shape; members in group order."""
    x = np.random.default_rng(n).normal(size=(n, 2, 3)).astype(np.float32)
    ir = popxl.Ir(replication=n)
    rg = ir.replica_grouping(group_size=group_size)
    with ir.main_graph:
        h2d = popxl.h2d_stream((2, 3), popxl.float32, "x")
        t = ops.host_load(h2d)
        outs = [ops.collectives.replicated_all_gather(t, 0, rg),
                ops.collectives.replicated_all_gather(t, 1, rg),
                ops.collectives.replicated_all_gather(t, 1, rg, "concat"),
                ops.collectives.replicated_all_gather(t, 0, rg, "new_axis")]
        streams = [popxl.d2h_stream(o.shape, o.dtype) for o in outs]
        for s, o in zip(streams, outs):
            ops.host_store(s, o)
    g = group_size
    assert [o.shape for o in outs] == [(2 * g, 3), (2, 3 * g), (2, 3 * g), (g, 2, 3)]
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run({h2d: x if n > 1 else x[0]})
    for r in range(n):
        members = x[[m for m in range(n) if m // g == r // g]]
        want = [np.concatenate(members, 0), np.concatenate(members, 1),
                np.concatenate(members, 1), members]
        for s, w in zip(streams, want):
            np.testing.assert_array_equal(got[s][r] if n > 1 else got[s], w)


def test_grouped_remote_variable_data_per_group() -> None:
    """PopXL: remote_variable data for a grouped variable has a leading group dimension; each
    replica's buffer entry holds its group's value, and get/write_variable_data go by group."""
    ir = popxl.Ir(replication=4)
    rg = ir.replica_grouping(stride=2, group_size=2)
    data = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    with ir.main_graph:
        buffer = popxl.remote_buffer((2,), popxl.float32, entries=1)
        v = popxl.remote_variable(data, buffer, 0, name="v", replica_grouping=rg)
        loaded = ops.remote_load(buffer, 0)
        ops.remote_store(buffer, 0, loaded + 1.0)
        s = popxl.d2h_stream((2,), popxl.float32, "loaded")
        ops.host_store(s, loaded)
    assert v.shape == (2,) and v.shape_on_host == (2, 2)
    with popxl.Session(ir, "ipu_model") as session:
        first = session.run()[s]
        np.testing.assert_array_equal(first, data[list(rg.assignment)])
        np.testing.assert_array_equal(session.get_tensor_data(v), data + 1)
        session.write_variable_data(v, np.zeros_like(data))
        np.testing.assert_array_equal(session.run()[s], np.zeros((4, 2)))
