"""Remote buffers and variables: load/store round trips with and without replicas, and
replica-sharded variables."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph
from xlgraph import ops
from xlgraph.ops.collectives import replicated_all_gather, replicated_reduce_scatter


@pytest.mark.parametrize("optimize", [True, False])
def test_entries_written_in_one_run_are_read_in_the_next(optimize):
    ir = xlgraph.Ir()
    with ir.main_graph, xlgraph.in_sequence():
        buffer = xlgraph.remote_buffer((2, 3), xlgraph.float32, entries=3)
        s_x = xlgraph.h2d_stream((2, 3), xlgraph.float32, "x")
        s_at = xlgraph.h2d_stream((), xlgraph.int32, "at")
        s_old = xlgraph.d2h_stream((2, 3), xlgraph.float32, "old")
        s_first = xlgraph.d2h_stream((2, 3), xlgraph.float32, "first")
        at = ops.host_load(s_at)
        ops.host_store(s_old, ops.remote_load(buffer, at))
        ops.remote_store(buffer, at, ops.host_load(s_x))
        ops.host_store(s_first, ops.remote_load_(buffer, 0, ops.init((2, 3), xlgraph.float32)))
    session = xlgraph.Session(ir, optimize=optimize)
    data = np.random.default_rng(0).normal(size=(3, 2, 3)).astype(np.float32)
    with session:
        for i in range(3):
            out = session.run({s_x: data[i], s_at: np.int32(i)})
            np.testing.assert_array_equal(out[s_old], np.zeros((2, 3)))
            np.testing.assert_array_equal(out[s_first], data[0])
        out = session.run({s_x: data[0] * 0, s_at: np.int32(2)})
    np.testing.assert_array_equal(out[s_old], data[2])


def test_every_replica_has_its_own_copy_of_a_buffer():
    ir = xlgraph.Ir(replication=3)
    with ir.main_graph, xlgraph.in_sequence():
        buffer = xlgraph.remote_buffer((4,), xlgraph.float32, entries=2)
        s_x = xlgraph.h2d_stream((4,), xlgraph.float32, "x")
        s_at = xlgraph.h2d_stream((), xlgraph.int32, "at")
        s_y = xlgraph.d2h_stream((4,), xlgraph.float32, "y")
        at = ops.host_load(s_at)
        ops.host_store(s_y, ops.remote_load(buffer, at))
        ops.remote_store(buffer, at, ops.host_load(s_x))
    session = xlgraph.Session(ir)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    with session:
        session.run({s_x: x, s_at: np.array([0, 1, 0], np.int32)})
        y = session.run({s_x: x * 0, s_at: np.array([1, 1, 0], np.int32)})[s_y]
    np.testing.assert_array_equal(y, [np.zeros(4), x[1], x[2]])


def test_remote_variables_are_loaded_stored_read_and_written():
    ir = xlgraph.Ir(replication=2)
    w0 = np.array([1.0, 2.0, 3.0], np.float32)
    with ir.main_graph, xlgraph.in_sequence():
        buffer = xlgraph.remote_buffer((3,), xlgraph.float32, entries=2)
        w = xlgraph.remote_variable(w0, buffer, 1, name="w")
        loaded = ops.remote_load(buffer, 1)
        ops.remote_store(buffer, 1, loaded * 2.0)
    session = xlgraph.Session(ir)
    np.testing.assert_array_equal(session.get_tensor_data(w), w0)
    with session:
        session.run()
    np.testing.assert_array_equal(session.get_tensor_data(w), w0 * 2)
    session.write_variable_data(w, np.ones(3, np.float32))
    with session:
        session.run()
    np.testing.assert_array_equal(session.get_tensor_data(w), np.full(3, 2.0))
    with pytest.raises(xlgraph.errors.ShapeError, match="holds"):
        with xlgraph.Ir().main_graph:
            xlgraph.remote_variable(np.zeros(2, np.float32), buffer)


def test_a_remote_variable_used_directly_is_refused():
    ir = xlgraph.Ir()
    with ir.main_graph:
        buffer = xlgraph.remote_buffer((3,), xlgraph.float32)
        w = xlgraph.remote_variable(np.zeros(3, np.float32), buffer)
        ops.host_store(xlgraph.d2h_stream((3,), xlgraph.float32), w + 1.0)
    with pytest.raises(xlgraph.errors.GraphMismatchError, match="remote_load"):
        xlgraph.Session(ir)


def test_replica_sharded_variables_shard_gather_and_update():
    """RTS as in PopXL's MNIST: each replica keeps a shard of W, gathers the whole W for use,
    and updates its shard with its slice of the reduced gradient."""
    replicas = 4
    ir = xlgraph.Ir(replication=replicas)
    w0 = np.random.default_rng(1).normal(size=(3, 5)).astype(np.float32)  # 15 -> 4 shards of 4
    with ir.main_graph, xlgraph.in_sequence():
        w, shard = xlgraph.replica_sharded_variable(w0, xlgraph.float32, "w")
        s_g = xlgraph.h2d_stream((3, 5), xlgraph.float32, "g")
        s_full = xlgraph.d2h_stream((3, 5), xlgraph.float32, "full")
        s_shard = xlgraph.d2h_stream((4,), xlgraph.float32, "shard")
        assert shard.shape == (4,) and shard.meta_shape == (3, 5)
        ops.host_store(s_shard, shard)
        ops.host_store(s_full, replicated_all_gather(shard))
        g = replicated_reduce_scatter(ops.host_load(s_g), "mean",
                                      configure_output_for_replicated_tensor_sharding=True)
        assert g.meta_shape == (3, 5)
        ops.scaled_add_(shard, g, b=-1.0)
        ops.remote_store(w.remote.buffer, 0, shard)
    session = xlgraph.Session(ir)
    grads = np.random.default_rng(2).normal(size=(replicas, 3, 5)).astype(np.float32)
    with session:
        out = session.run({s_g: grads})
    padded = np.concatenate([w0.reshape(-1), [0.0]])
    np.testing.assert_array_equal(out[s_shard], padded.reshape(4, 4))
    np.testing.assert_array_equal(out[s_full], np.broadcast_to(w0, (replicas, 3, 5)))
    np.testing.assert_allclose(session.get_tensor_data(w), w0 - grads.mean(axis=0), rtol=1e-6)
