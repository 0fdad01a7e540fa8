"""``popxl_addons.transforms`` and ``patterns``: memory proportions, the fc-pass flag,
accumulation names, pipeline stashes, pre-alias patterns."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

import xlgraph as popxl
import xlgraph.addons as addons
from tests.addons.helpers import fetch, run
from xlgraph import ops
from xlgraph.addons.patterns import apply_pre_alias_patterns


class Lin(addons.Module):
    def build(self, x):
        w = self.add_variable_input("w", partial(np.full, (x.shape[-1], 2), 0.5, np.float32))
        return x @ w


def test_available_memory_proportion_by_ipu_and_fc_pass():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones((2, 2), np.float32))
        with popxl.ipu(0):
            m0 = ops.matmul(a, a, available_memory_proportion=0.9)
        with popxl.ipu(1):
            m1 = ops.matmul(a.copy_to_ipu(1), a.copy_to_ipu(1))
        g = ir.create_graph(lambda t: t @ t, a)
        ops.call(g, a)
        relu = ops.relu(m0)
    addons.set_available_memory_proportion_by_ipu(ir, [0.2, 0.3])
    assert m0.producer.hints["available_memory_proportion"] == 0.2  # overrides 0.9
    assert m1.producer.hints["available_memory_proportion"] == 0.3
    assert g.ops[0].hints["available_memory_proportion"] == 0.2
    assert "available_memory_proportion" not in relu.producer.hints
    addons.set_graph_available_memory_proportion_by_ipu(g, [0.7])
    assert g.ops[0].hints["available_memory_proportion"] == 0.7
    addons.disable_fc_pass(ir)
    assert m0.producer.hints["fully_connected_pass"] is False
    addons.enable_fc_pass(ir)
    assert g.ops[0].hints["fully_connected_pass"] is True


def test_pre_alias_patterns_are_accepted_without_effect():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32))
        y = x + 1.0
    before = [op.defn.name for op in ir.main_graph.ops]
    for level in ("no_patterns", "minimal", "default", "all"):
        apply_pre_alias_patterns(ir, level)
    assert [op.defn.name for op in ir.main_graph.ops] == before
    with pytest.raises(ValueError, match="level"):
        apply_pre_alias_patterns(ir, "most")
    with ir.main_graph:
        (out,) = fetch(y)
    assert run(ir, [out])[0].tolist() == [2.0, 2.0]


def test_accumulation_names_a_plain_input_by_its_sanitised_name():
    ir = popxl.Ir()
    with ir.main_graph:
        facts, fwd = Lin().create_graph(popxl.TensorSpec((1, 3), popxl.float32))
        x = fwd.graph.inputs[0]
        accum_facts, bwd = addons.autodiff_with_accumulation(fwd, [x, fwd.args.w])
    assert "w" in accum_facts.accum.keys() and len(accum_facts.accum.keys()) == 2
    assert all("." not in k and "/" not in k for k in accum_facts.accum.keys())
    assert bwd.graph.outputs == ()  # every required gradient is accumulated


def test_pipeline_stash_and_restore_activations_matches_inputs_dict():
    ir = popxl.Ir()
    with ir.main_graph:
        facts, fwd = Lin().create_graph(popxl.TensorSpec((1, 3), popxl.float32))
        bwd = addons.autodiff(fwd)
        variables = facts.init()
        stream = popxl.h2d_stream((1, 3), popxl.float32, "x")
        with addons.pipelined_execution(2) as p:
            with p.stage(0):
                info = fwd.bind(variables).call_with_info(ops.host_load(stream))
            with p.stage(1):
                acts = p.stash_and_restore_activations(info, bwd.grad_graph_info)
                assert acts == bwd.grad_graph_info.inputs_dict(info)
                assert p.stash_and_restore_tensor(info.outputs[0]) is info.outputs[0]


def test_batch_serialisation_is_top_level():
    assert addons.batch_serialise is addons.transforms.batch_serialise
    assert addons.RemoteHandle is addons.transforms.RemoteHandle


class Two(addons.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = Lin()
        self.fc2 = Lin()

    def build(self, x):
        return self.fc2(self.fc1(x).reshape((1, 2)) @ popxl.constant(np.ones((2, 3),
                                                                            np.float32)))


def test_accumulators_zip_with_the_variables_by_tensor_name():
    """A data-parallel program pairs ``variables.tensors`` with the accumulators'
    ``tensors``: sorted by tensor name, ``mean_accum_counter`` sorts last, past the pairs."""
    ir = popxl.Ir()
    with ir.main_graph:
        facts, fwd = Two().create_graph(popxl.TensorSpec((1, 3), popxl.float32))
        accum_facts, _ = addons.autodiff_with_accumulation(fwd, fwd.args.tensors)
        variables, accum = facts.init(), accum_facts.init()
    pairs = list(zip(variables.tensors, accum.tensors))
    assert len(accum.tensors) == len(variables.tensors) + 1
    assert accum.tensors[-1].name == "mean_accum_counter"
    assert all(g.name == f"accum.{v.name}" and g.shape == v.shape for v, g in pairs)


class _Double(addons.Module):
    def build(self, x):
        return x * 2.0


@pytest.mark.parametrize("io_mode,steps", [("compute", 3), ("io", 3), ("io_overlapped", 3),
                                           ("io_overlapped", 1)])
def test_batch_serialise_io_mode_places_the_transfers(io_mode, steps):
    """``io_mode``: "compute" transfers on the compute tiles; "io" (and "io_overlapped") on
    the IO tiles with a copy to the compute tiles after each load and to the IO tiles before
    each store; values are the same in every mode."""
    ir = popxl.Ir()
    ir._pb_ir.getSessionOptions().numIOTiles = 32
    with ir.main_graph:
        _, graph = _Double().create_graph(popxl.TensorSpec((2,), popxl.float32))
        x_in, y_out = graph.graph.inputs[0], graph.graph.outputs[0]
        stream = popxl.h2d_stream((2,), popxl.float32, "x")
        out = popxl.d2h_stream((2,), popxl.float32, "y")
        buffer = addons.batch_serial_buffer(y_out, steps=steps)
        result = addons.batch_serialise(graph, steps, {x_in: stream}, {y_out: out},
                                        {y_out: addons.RemoteHandle(buffer)}, io_mode=io_mode)
        result.graph.call(0)
        entries = [popxl.remote_variable(np.zeros(2, np.float32), buffer, i)
                   for i in range(steps)]
    body = next(g for g in ir.graphs if "batch_serial_step" in g.name)
    placed = {op.defn.name: op.hints.get("tile_set", "compute") for op in body.ops
              if op.defn.name in ("host_load", "host_store", "remote_store")}
    copies = sum(op.defn.name == "io_tile_copy" for op in body.ops)
    on_io = io_mode != "compute"
    assert placed == dict.fromkeys(["host_load", "host_store", "remote_store"],
                                   "io" if on_io else "compute")
    assert copies == (3 if on_io else 0)  # after the load, before each of the two stores
    ir.num_host_transfers = steps
    data = np.arange(2 * steps, dtype=np.float32).reshape(steps, 2)
    with popxl.Session(ir, "cpu") as s:
        outs = s.run({stream: data if steps > 1 else data[0]})
        stored = [s.get_tensor_data(e) for e in entries]
    np.testing.assert_array_equal(outs[out].reshape(steps, 2), data * 2)
    np.testing.assert_array_equal(np.stack(stored), data * 2)


def test_batch_serialise_rows_and_row_offsets():
    """With ``rows=2`` the result takes the row index first; step ``i`` of row ``r`` loads entry
    ``(r + row_offset) * steps + i``; ``row_offset=None`` always reads the first row and a
    callable maps the row tensor (here ``1 - r``: rows stored swapped)."""
    steps, rows = 2, 2
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        _, graph = _Double().create_graph(popxl.TensorSpec((2,), popxl.float32))
        x_in, y_out = graph.graph.inputs[0], graph.graph.outputs[0]
        src = addons.batch_serial_buffer(x_in, steps=steps, rows=rows)
        dst = addons.batch_serial_buffer(y_out, steps=steps, rows=rows)
        first = addons.batch_serial_buffer(y_out, steps=steps, rows=1)
        data = np.arange(8, dtype=np.float32).reshape(4, 2)  # entry e holds [2e, 2e+1]
        src_vars = [popxl.remote_variable(data[e], src, e) for e in range(4)]
        dst_vars = [popxl.remote_variable(np.zeros(2, np.float32), dst, e) for e in range(4)]
        first_vars = [popxl.remote_variable(np.zeros(2, np.float32), first, e)
                      for e in range(2)]
        swapped = addons.RemoteHandle(dst, row_offset=lambda r: 1 - r)
        loads = {x_in: addons.RemoteHandle(src)}
        result = addons.batch_serialise(graph, steps, loads, {}, {y_out: swapped}, rows=rows,
                                        io_mode="compute")
        assert result.graph.graph.inputs[0].name == "batch_serial_loop_index"
        for row in range(rows):
            result.graph.call(popxl.constant(row, popxl.int32))
        only_first = addons.batch_serialise(
            graph, steps, {x_in: addons.RemoteHandle(src, row_offset=None)}, {},
            {y_out: addons.RemoteHandle(first, row_offset=None)}, rows=rows, io_mode="compute")
        only_first.graph.call(popxl.constant(1, popxl.int32))
    with popxl.Session(ir, "cpu") as s:
        s.run()
        stored = np.stack([s.get_tensor_data(v) for v in dst_vars])
        firsts = np.stack([s.get_tensor_data(v) for v in first_vars])
    assert src_vars  # the source entries exist
    # row 0 (entries 0, 1) went to row 1 (entries 2, 3) and the other way round
    np.testing.assert_array_equal(stored, 2 * data[[2, 3, 0, 1]])
    np.testing.assert_array_equal(firsts, 2 * data[:2])  # row 1 asked, row 0 read and written
