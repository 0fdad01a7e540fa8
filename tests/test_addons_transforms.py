"""xlgraph.addons transforms and remote helpers: recompute_graph, repeat_graph,
pipelined_execution, batch_serialise, remote load/store graphs and the RTS helpers."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

import xlgraph as popxl
import xlgraph.addons as addons
from tests.test_addons_core import Lin, run
from xlgraph import ops
from xlgraph.addons import NamedTensors
from xlgraph.addons.transforms import RemoteHandle, batch_serial_buffer, batch_serialise


class Tanh(addons.Module):
    def build(self, x):
        w = self.add_variable_input("w", partial(np.random.normal, 0, 1, (x.shape[-1], 3)))
        return ops.tanh(x @ w)


@pytest.mark.parametrize("recompute", [False, True])
def test_recompute_graph_gives_the_same_gradients(recompute):
    np.random.seed(5)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.random.normal(size=(2, 4)).astype(np.float32), name="x")
        facts, fwd = Tanh().create_graph(x)
        bwd = addons.autodiff(fwd)
        if recompute:
            bwd = addons.recompute_graph(bwd)
            assert [c.fwd_tensor for c in bwd.grad_graph_info.expected_inputs[1:]] == \
                list(fwd.graph.inputs)
        variables = facts.init()
        info = fwd.bind(variables).call_with_info(x)
        dy = popxl.constant(np.ones((2, 3), np.float32))
        grads = bwd.call(dy, args=bwd.grad_graph_info.inputs_dict(info))
        outs = [addons.ops.host_store(g) for g in grads]
    res, s = run(ir)
    xv, w = s.get_tensor_data(x), s.get_tensor_data(variables.w)
    dpre = 1 - np.tanh(xv @ w) ** 2
    np.testing.assert_allclose(res[outs[0]], dpre @ w.T, rtol=1e-5)
    np.testing.assert_allclose(res[outs[1]], xv.T @ dpre, rtol=1e-5)


def test_repeat_graph_moves_the_main_program_into_a_loop():
    """``repeat_graph(ir.main_graph, n)`` in place: main keeps one repeat op; the body runs
    the load, the accumulation and the store every iteration, by reference to ``total``."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        x_stream = popxl.h2d_stream((4,), popxl.float32, "x")
        total = popxl.variable(np.zeros(4, np.float32), name="total")
        ops.var_updates.accumulate_(total, ops.host_load(x_stream))
        out = addons.host_store(total)
    assert addons.transforms.repeat_graph(ir.main_graph, 1) is ir.main_graph
    body = addons.transforms.repeat_graph(ir.main_graph, 8)
    assert [op.defn.name for op in ir.main_graph.ops] == ["repeat"]
    assert [op.defn.name for op in body.ops] == ["host_load", "accumulate_", "host_store"]
    assert [(t.name, t.by_ref) for t in body.inputs] == [("total", True)]
    ir.num_host_transfers = 8
    data = np.arange(32, dtype=np.float32).reshape(8, 4)
    res, s = run(ir, {x_stream: data})
    np.testing.assert_allclose(res[out], np.cumsum(data, 0))
    np.testing.assert_allclose(s.get_tensor_data(total), data.sum(0))


def test_pipelined_execution_runs_each_step_and_captures_outer_tensors():
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        stream = popxl.h2d_stream((2,), popxl.float32, "x")
        total = popxl.variable(np.zeros(2, np.float32), name="total")
        scale = popxl.variable(np.float32(3.0), name="scale")
        out = popxl.d2h_stream((2,), popxl.float32, "y")
        with addons.pipelined_execution(4) as p:
            with p.stage(0), popxl.ipu(0):
                y = (ops.host_load(stream) * scale).copy_to_ipu(1)
            with p.stage(1), popxl.ipu(1):
                ops.host_store(out, y + 1)
                ops.var_updates.accumulate_(total, y)
        with pytest.raises(ValueError, match="opened after stage"):
            with addons.pipelined_execution(2) as q, q.stage(1), q.stage(0):
                pass
    ir.num_host_transfers = 4
    data = np.arange(8, dtype=np.float32).reshape(4, 2)
    res, s = run(ir, {stream: data})
    np.testing.assert_allclose(res[out], data * 3 + 1)
    np.testing.assert_allclose(s.get_tensor_data(total), (data * 3).sum(0))


def test_batch_serialise_streams_buffers_and_accumulators():
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        stream = popxl.h2d_stream((1, 2), popxl.float32, "x")
        facts, graph = Lin(2).create_graph(popxl.TensorSpec((1, 2), popxl.float32))
        out_stream = popxl.d2h_stream((1, 2), popxl.float32, "y")
        handle = RemoteHandle(batch_serial_buffer(graph.graph.outputs[0], steps=3))
        result = batch_serialise(graph, 3, {graph.graph.inputs[0]: stream},
                                 {graph.graph.outputs[0]: out_stream},
                                 {graph.graph.outputs[0]: handle}, io_mode="compute")
        assert result.graph.args.keys_flat() == ["weight", "bias"]
        variables = facts.init()
        result.graph.bind(variables).call(0)
        entries = [popxl.remote_variable(np.zeros((1, 2), np.float32), handle.buffer, i)
                   for i in range(3)]
    ir.num_host_transfers = 3
    data = np.arange(6, dtype=np.float32).reshape(3, 1, 2)
    res, s = run(ir, {stream: data})
    w, b = s.get_tensor_data(variables.weight), s.get_tensor_data(variables.bias)
    ref = data @ w + b
    np.testing.assert_allclose(res[out_stream], ref, rtol=1e-5)
    np.testing.assert_allclose([s.get_tensor_data(e) for e in entries], ref, rtol=1e-5)


def test_remote_load_store_graphs_round_trip_named_tensors():
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        facts, _ = Lin(3).create_graph(popxl.TensorSpec((1, 2), popxl.float32))
        buffers = addons.named_variable_buffers(facts, entries=2)
        assert buffers.keys_flat() == ["weight", "bias"] and buffers.weight.entries == 2
        variables = facts.init_remote(buffers, 1)
        load, names = addons.load_remote_graph(buffers, entries=2)
        store = addons.store_remote_graph(buffers, entries=2)
        tensors = NamedTensors.pack(names, load.call(1))
        ops.scaled_add_(tensors.bias, popxl.constant(np.ones(3, np.float32)))
        store.bind(tensors).call(1)
    _, s = run(ir)
    np.testing.assert_allclose(s.get_tensor_data(variables.bias), np.ones(3))


def test_rts_gather_and_reduce_scatter_over_two_replicas():
    ir = popxl.Ir(replication=2)
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    with ir.main_graph, popxl.in_sequence():
        spec = addons.rts.replica_sharded_spec(popxl.TensorSpec((2, 3), popxl.float32), 2)
        assert spec.shape == (3,) and spec.meta_shape == (2, 3)
        buffer = addons.create_remote_buffer(popxl.TensorSpec((2, 3), popxl.float32),
                                             shard_over=2)
        var = popxl.remote_replica_sharded_variable(data, buffer, 0, name="v")
        shard = ops.remote_load(buffer, 0)
        gather, names = addons.rts.all_gather_replica_sharded_graph(NamedTensors(v=shard))
        (whole,) = gather.bind(NamedTensors(v=shard)).call()
        reduce, _ = addons.rts.reduce_replica_sharded_graph(NamedTensors(v=whole), op="add")
        (reduced,) = reduce.bind(NamedTensors(v=whole)).call()
        outs = [addons.ops.host_store(t) for t in (whole, reduced)]
    res, s = run(ir)
    np.testing.assert_allclose(res[outs[0]], [data, data])  # every replica: the whole tensor
    np.testing.assert_allclose(res[outs[1]], (2 * data).reshape(2, 3))  # its half, summed
    np.testing.assert_allclose(s.get_tensor_data(var), data)


def test_batch_serialise_gives_each_step_its_own_seed():
    def noise(seed: popxl.Tensor):
        return ops.random_normal(seed, (2,))

    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        graph = addons.GraphWithNamedArgs(ir.create_graph(noise, popxl.TensorSpec((2,),
                                                                                  popxl.uint32)))
        out = popxl.d2h_stream((2,), popxl.float32, "noise")
        seed_in = graph.graph.inputs[0]
        result = batch_serialise(graph, 3, {}, {graph.graph.outputs[0]: out}, {},
                                 seed_input=seed_in, io_mode="compute")
        seed, _ = addons.seed_variable(11)
        result.graph.call(0, seed)
    ir.num_host_transfers = 3
    first, _ = run(ir)
    again, _ = run(ir)
    draws = first[out]
    assert draws.shape == (3, 2) and len({tuple(r) for r in draws.round(6)}) == 3
    np.testing.assert_array_equal(again[out], draws)  # a fresh session: the same draws
