"""``popxl_addons.remote`` and ``rts``: buffers by name, load/store graphs, sharding rules."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

import xlgraph as popxl
import xlgraph.addons as addons
from tests.addons.helpers import fetch
from xlgraph import ops
from xlgraph.addons import remote, rts


def factories(ir, group=2):
    return addons.NamedVariableFactories.from_dict({
        "b": addons.VariableFactory(partial(np.arange, 8, dtype=np.float32)),
        "a": addons.VariableFactory(partial(np.ones, (2, 2), np.float32),
                                    replica_grouping=ir.replica_grouping(group_size=group))})


def test_create_remote_buffer_shards_over_the_group_by_default():
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        spec = popxl.TensorSpec((4, 2), popxl.float32)
        assert addons.create_remote_buffer(spec).tensor_shape == (2,)  # 8 / 4 replicas
        assert addons.create_remote_buffer(spec, shard_over=1).tensor_shape == (4, 2)
        grouping = ir.replica_grouping(group_size=2)
        by_group = addons.create_remote_buffer(spec, 3, shard_over=grouping)  # a grouping
        assert by_group.tensor_shape == (4,) and by_group.entries == 3
        with pytest.raises(ValueError, match="divide"):
            addons.create_remote_buffer(popxl.TensorSpec((3,), popxl.float32))
        shard = popxl.TensorSpec((2,), popxl.float32, (4, 2))  # already a shard
        tagged = addons.create_remote_buffer(shard)
        assert tagged.tensor_shape == (2,) and tagged.meta_shape == (4, 2)


def test_named_variable_buffers_shard_over_options():
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        facts = factories(ir)
        whole = addons.named_variable_buffers(facts)
        assert whole.b.tensor_shape == (2,) and whole.a.tensor_shape == (2,)  # group of 2
        assert addons.named_variable_buffers(facts, shard_over_dict=False).b.tensor_shape == (8,)
        assert addons.named_variable_buffers(facts, shard_over_dict=2).b.tensor_shape == (4,)
        assert addons.named_variable_buffers(facts, shard_over_dict={"b": 1}).a.tensor_shape \
            == (2,)
        with pytest.raises(ValueError, match="between 1"):
            addons.named_variable_buffers(facts, shard_over_dict=5)


def test_load_and_store_graphs_and_in_place_helpers():
    ir = popxl.Ir()
    with ir.main_graph:
        facts = factories(ir, 1)
        buffers = addons.named_variable_buffers(facts, entries=1)
        load, names = addons.load_remote_graph(buffers, entries=2)
        assert names == ["a", "b"] and buffers.a.entries == 2  # raised to `entries`
        assert load.graph.inputs[0].name == "load_index"
        store = addons.store_remote_graph(buffers)
        assert store.graph.inputs[0].name == "store_index"
        assert store.args.keys_flat() == ["a", "b"]
        variables = facts.init_remote(buffers)
        loaded = remote.load_remote(buffers, 0)
        remote.store_remote(buffers, loaded.map(lambda t: t * 2.0), 1)
        again = addons.NamedTensors.pack(names, load.call(1))
        streams = fetch(again.b)
    with popxl.Session(ir, "cpu") as s:
        out = s.run({})
    np.testing.assert_array_equal(out[streams[0]], 2 * np.arange(8))
    assert variables.keys_flat() == ["a", "b"]


def test_replica_sharded_spec_rules():
    spec = popxl.TensorSpec((4, 3), popxl.float32)
    assert rts.replica_sharded_spec(spec, 4) == popxl.TensorSpec((3,), popxl.float32, (4, 3))
    assert rts.replica_sharded_spec(spec, 1) == spec
    assert rts.replica_sharded_spec(spec, 5) == spec  # does not divide
    shard = popxl.TensorSpec((3,), popxl.float32, (4, 3))
    assert rts.replica_sharded_spec(shard, 4) == shard


def test_reduce_replica_sharded_tensor_paths():
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        stream = popxl.h2d_stream((4,), popxl.float32, "x")
        x = ops.host_load(stream)
        pairs = ir.replica_grouping(group_size=2)
        scattered = rts.reduce_replica_sharded_tensor(x)  # reduce-scatter over all four
        sliced = rts.reduce_replica_sharded_tensor(x, shard_group=pairs)  # all-reduce, slice
        plain = rts.reduce_replica_sharded_tensor(x, shard_group=ir.replica_grouping(
            group_size=1))
        assert scattered.shape == (1,) and sliced.shape == (2,) and plain.shape == (4,)
        whole = rts.gather_replica_sharded_tensor(scattered)
        assert rts.gather_replica_sharded_tensor(x) is x  # no meta-shape: unchanged
        streams = fetch(scattered, sliced, plain, whole)
    data = np.arange(16, dtype=np.float32).reshape(4, 4)
    total = data.sum(0)
    with popxl.Session(ir, "cpu") as s:
        out = s.run({stream: data})
    got = [out[st] for st in streams]
    np.testing.assert_allclose(got[0][:, 0], total)
    for r in range(4):
        np.testing.assert_allclose(got[1][r], total[(r % 2) * 2:(r % 2) * 2 + 2])
        np.testing.assert_allclose(got[2][r], total)
        np.testing.assert_allclose(got[3][r], total)
