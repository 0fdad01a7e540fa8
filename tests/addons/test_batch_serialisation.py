"""``batch_serialise`` / ``batch_serialise_fwd_and_grad`` as popxl-addons programs use them:
tuple handles, the row-index input, entry arithmetic, stores of inputs, RTS handles,
``ReplicaGrouping`` store entries and the gradient result's args and info."""

from __future__ import annotations

import re
from functools import partial

import numpy as np
import pytest

import xlgraph as popxl
import xlgraph.addons as addons
from xlgraph import ops
from xlgraph.addons import NamedTensors, RemoteHandle


class Scale(addons.Module):
    def build(self, x):
        w = self.add_variable_input("w", partial(np.full, x.shape, 3.0, np.float32))
        return x * w


def _ir(replicas: int = 1) -> popxl.Ir:
    ir = popxl.Ir(replication=replicas)
    ir._pb_ir.getSessionOptions().numIOTiles = 32
    return ir


def _entries(buffer, data):
    return [popxl.remote_variable(np.asarray(d, np.float32), buffer, i)
            for i, d in enumerate(data)]


def test_tuple_handles_row_index_and_result_signature():
    """A ``(buffer, row_offset)`` tuple is a handle (converted in the caller's dict); the
    result takes the row index first, then the passed-through inputs, and has no outputs; a
    Python int row reads entries ``row * steps + i``."""
    steps, rows = 2, 2
    ir = _ir()
    with ir.main_graph, popxl.in_sequence():
        facts, fwd = Scale().create_graph(popxl.TensorSpec((2,), popxl.float32))
        x, y = fwd.graph.inputs[0], fwd.graph.outputs[0]
        src = addons.batch_serial_buffer(x, steps, rows)
        dst = addons.batch_serial_buffer(y, steps, rows)
        data = np.arange(8, dtype=np.float32).reshape(4, 2)
        _entries(src, data)
        out = _entries(dst, np.zeros((4, 2)))
        loads, stores = {x: (src, 0)}, {y: (dst, 0)}
        res = addons.batch_serialise(fwd, steps, loads, {}, stores, rows=rows)
        assert isinstance(loads[x], RemoteHandle) and loads[x].buffer is src
        assert stores[y] == RemoteHandle(dst, 0, None)
        assert res.stored_buffers[y] is stores[y]
        ins = res.graph.graph.inputs
        assert [t.name for t in ins] == ["batch_serial_loop_index", "w"]
        assert ins[0].dtype == popxl.int32 and ins[0].shape == ()
        assert res.graph.graph.outputs == () and res.graph.args.keys_flat() == ["w"]
        remapped = res.remap_tensors(fwd.args)  # the original graph's inputs, now the loop's
        assert remapped.keys_flat() == ["w"] and remapped.w is res.graph.args.w is ins[1]
        res.graph.bind(facts.init()).call(1)  # row 1 only
    with popxl.Session(ir, "cpu") as s:
        s.run()
        got = np.stack([s.get_tensor_data(v) for v in out])
    np.testing.assert_array_equal(got, [[0, 0], [0, 0], 3 * data[2], 3 * data[3]])


def test_entry_arithmetic_grows_buffers_and_stores_inputs():
    """An int offset ``k`` uses entry ``(n + k) * steps + i`` and grows the buffer to
    ``steps * (k + rows)``; ``None`` always the first row; an input can be stored too, and an
    input loaded from a buffer is reported by its load handle."""
    steps = 2
    ir = _ir()
    with ir.main_graph, popxl.in_sequence():
        facts, fwd = Scale().create_graph(popxl.TensorSpec((2,), popxl.float32))
        x, y = fwd.graph.inputs[0], fwd.graph.outputs[0]
        src = popxl.remote_buffer((2,), popxl.float32, 1)
        dst = popxl.remote_buffer((2,), popxl.float32, 1)
        copy = popxl.remote_buffer((2,), popxl.float32, 1)
        loads = {x: RemoteHandle(src, None)}
        stores = {y: RemoteHandle(dst, 1), x: (copy, None)}
        res = addons.batch_serialise(fwd, steps, loads, {}, stores, io_mode="compute")
        assert (src.entries, dst.entries, copy.entries) == (2, 4, 2)
        assert res.stored_buffers[x] is loads[x]  # not stored again: its load handle
        data = np.array([[1, 2], [3, 4]], np.float32)
        _entries(src, data)
        out = _entries(dst, np.zeros((4, 2)))
        res.graph.bind(facts.init()).call(0)
    with popxl.Session(ir, "cpu") as s:
        s.run()
        got = np.stack([s.get_tensor_data(v) for v in out])
    np.testing.assert_array_equal(got, [[0, 0], [0, 0], 3 * data[0], 3 * data[1]])


def test_stream_input_stored_to_a_buffer():
    """A stream-fed input in ``store_buffers`` is stored as each step loads it."""
    ir = _ir()
    with ir.main_graph, popxl.in_sequence():
        facts, fwd = Scale().create_graph(popxl.TensorSpec((2,), popxl.float32))
        x = fwd.graph.inputs[0]
        stream = popxl.h2d_stream((2,), popxl.float32, "x")
        buf = addons.batch_serial_buffer(x, 3)
        res = addons.batch_serialise(fwd, 3, {x: stream}, {}, {x: (buf, 0)})
        out = _entries(buf, np.zeros((3, 2)))
        res.graph.bind(facts.init()).call(0)
    ir.num_host_transfers = 3
    data = np.arange(6, dtype=np.float32).reshape(3, 2)
    with popxl.Session(ir, "cpu") as s:
        s.run({stream: data})
        got = np.stack([s.get_tensor_data(v) for v in out])
    np.testing.assert_array_equal(got, data)


def test_validation_errors():
    ir = popxl.Ir()
    with ir.main_graph:
        _, fwd = Scale().create_graph(popxl.TensorSpec((2,), popxl.float32))
        x = fwd.graph.inputs[0]
        here = r" \[at test_batch_serialisation.py:\d+\]$"  # each names the user's line
        with pytest.raises(ValueError, match="IR must have IO tiles.*" + here):
            addons.batch_serialise(fwd, 2, {}, {}, {})
        with pytest.raises(ValueError, match="rows must be at least 1, got 0" + here):
            addons.batch_serialise(fwd, 2, {}, {}, {}, rows=0, io_mode="compute")
        with pytest.raises(ValueError, match="unknown io_mode 'fast'.*" + here):
            addons.batch_serialise(fwd, 2, {}, {}, {}, io_mode="fast")
        with pytest.raises(TypeError, match=re.escape(x.id) + ".*" + here):
            addons.batch_serialise(fwd, 2, {x: "buffer"}, {}, {}, io_mode="compute")
        y = fwd.graph.outputs[0]
        with pytest.raises(ValueError, match=re.escape(y.id) + " in load_handles.*" + here):
            addons.batch_serialise(fwd, 2, {y: (addons.batch_serial_buffer(y, 2), 0)}, {}, {},
                                   io_mode="compute")


def test_shard_group_handles_gather_on_load_and_slice_on_store():
    """A handle whose ``shard_group`` has 2 replicas holds each entry split over them: the
    load is all-gathered before the call, the store cut to this replica's slice."""
    ir = _ir(2)
    group = ir.replica_grouping(group_size=2)
    with ir.main_graph, popxl.in_sequence():
        facts, fwd = Scale().create_graph(popxl.TensorSpec((4,), popxl.float32))
        x, y = fwd.graph.inputs[0], fwd.graph.outputs[0]
        src = addons.batch_serial_buffer(x, 2, shard_group=group)
        dst = addons.batch_serial_buffer(y, 2, shard_group=group)
        assert src.tensor_shape == (2,) and src.meta_shape == (4,)
        data = np.arange(8, dtype=np.float32).reshape(2, 4)
        for i in range(2):
            popxl.remote_replica_sharded_variable(data[i], src, i)
        out = [popxl.remote_replica_sharded_variable(np.zeros(4, np.float32), dst, i)
               for i in range(2)]
        res = addons.batch_serialise(fwd, 2, {x: (src, 0, group)}, {}, {y: (dst, 0, group)})
        res.graph.bind(facts.init()).call(0)
    with popxl.Session(ir, "cpu") as s:
        s.run()
        got = np.stack([s.get_tensor_data(v) for v in out])
    np.testing.assert_array_equal(got, 3 * data)


class Affine(addons.Module):
    def build(self, x):
        w = self.add_variable_input("w", lambda: np.array([[1.0, 2.0], [3.0, 4.0]], np.float32))
        return ops.gelu(x @ w)


def test_fwd_and_grad_activations_args_and_info():
    """Activations go through new buffers (sharded over a ``ReplicaGrouping`` given in
    ``store_buffers``, which is removed from it); the weights become named args of the
    gradient result; ``gradient_graph.args`` is replaced in place; the seed needs a handle;
    the gradients match the unserialised ones."""
    steps = 2
    ir = _ir(2)
    group = ir.replica_grouping(group_size=2)
    with ir.main_graph, popxl.in_sequence():
        facts, fwd = Affine().create_graph(popxl.TensorSpec((2,), popxl.float32))
        x, y = fwd.graph.inputs[0], fwd.graph.outputs[0]
        acc_facts, bwd = addons.autodiff_with_accumulation(fwd, fwd.args.tensors,
                                                           grads_required=[x])
        assert bwd.grad_graph_info._expected_inputs == list(bwd.grad_graph_info.expected_inputs)
        assert bwd.grad_graph_info._expected_outputs == list(
            bwd.grad_graph_info.expected_outputs)
        seed = bwd.graph.inputs[0]
        with pytest.raises(ValueError, match="load_handles"):
            addons.batch_serialise_fwd_and_grad(fwd, bwd.copy(), fwd.args, steps, {}, {}, {})
        xs = addons.batch_serial_buffer(x, steps)
        ones = addons.batch_serial_buffer(y, steps)
        data = np.array([[0.5, -1.0], [2.0, 0.25]], np.float32)
        _entries(xs, data)
        _entries(ones, np.ones((steps, 2)))
        act = next(c.fwd_tensor for c in bwd.grad_graph_info.expected_inputs
                   if c.fwd_tensor is not x and c.fwd_tensor not in fwd.args.tensors
                   and c.connection_type.name == "Fwd")
        stores = {act: group}
        fwd_res, grad_res = addons.batch_serialise_fwd_and_grad(
            fwd, bwd, fwd.args, steps, {x: (xs, 0), seed: (ones, 0)}, {}, stores)
        assert stores == {}
        assert fwd_res.stored_buffers[act].shard_group is group
        assert fwd_res.stored_buffers[act].buffer.meta_shape == act.shape
        assert bwd.args.keys_flat() == ["w", "mean_accum_counter", "accum.w"]
        assert grad_res.graph.args.keys_flat() == ["w", "mean_accum_counter", "accum.w"]
        assert grad_res.graph.grad_graph_info.forward_graph is fwd_res.graph.graph
        weights = facts.init()
        accum = acc_facts.init()
        fwd_res.graph.bind(weights).call(0)
        grad_res.graph.bind(NamedTensors.from_dict({**weights.to_dict(),
                                                    **accum.to_dict()})).call(0)
    with popxl.Session(ir, "cpu") as s:
        s.run()
        got = s.get_tensor_data(accum.accum.w)
    w = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    z = data @ w
    dgelu = 0.5 * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)))
    dgelu += 0.5 * z * (1 - np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)) ** 2) * \
        np.sqrt(2 / np.pi) * (1 + 3 * 0.044715 * z ** 2)
    ref = np.mean([np.outer(data[i], dgelu[i]) for i in range(steps)], axis=0)
    np.testing.assert_allclose(got[0] if got.ndim == 3 else got, ref, rtol=1e-3)
