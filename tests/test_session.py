"""Session: attach/detach and weight sync, streams, input validation, failure atomicity."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import errors, ops
from xlgraph.op import OpDef, apply1, same_spec


def counter_ir(transfers: int = 1):
    """``w += x`` for each loaded x; stores w after each update."""
    ir = popxl.Ir()
    ir.num_host_transfers = transfers
    with ir.main_graph, popxl.in_sequence():
        x_stream = popxl.h2d_stream((2,), popxl.float32, "x")
        out_stream = popxl.d2h_stream((2,), popxl.float32, "w_out")
        w = popxl.variable(np.zeros(2), name="w")

        def body() -> None:
            t = popxl.graph_input((2,), popxl.float32, "t", by_ref=True)
            ops.var_updates.accumulate_(t, ops.host_load(x_stream))
            ops.host_store(out_stream, t)

        ops.repeat(ir.create_graph(body), transfers, w)
    return ir, x_stream, out_stream, w


def test_attach_detach_and_weight_sync() -> None:
    ir, x_stream, out_stream, w = counter_ir()
    session = popxl.Session(ir, "ipu_model")
    assert not session.is_attached
    np.testing.assert_array_equal(session.get_tensor_data(w), 0.0)
    with pytest.raises(errors.NotAttachedError, match="with session"):
        session.run({x_stream: np.ones(2, np.float32)})
    with session:
        assert session.is_attached
        with session:  # nested: no re-attach, no sync on the inner exit
            session.run({x_stream: np.ones(2, np.float32)})
        assert session.is_attached
        np.testing.assert_array_equal(session.get_tensor_data(w), 1.0)
        session.run({x_stream: np.ones(2, np.float32)})
    assert not session.is_attached
    np.testing.assert_array_equal(session.get_tensor_data(w), 2.0)
    session.write_variable_data(w, np.full(2, 10.0, np.float32))
    with session:
        out = session.run({x_stream: np.ones(2, np.float32)})
    np.testing.assert_array_equal(out[out_stream], 11.0)


def test_weights_to_host_on_exit_false_keeps_host_values() -> None:
    ir, x_stream, _, w = counter_ir()
    session = popxl.Session(ir, weights_to_host_on_exit=False)
    with session:
        session.run({x_stream: np.ones(2, np.float32)})
    np.testing.assert_array_equal(session.get_tensor_data(w), 0.0)


@pytest.mark.parametrize("optimize", [True, False])
def test_num_host_transfers_shapes(optimize: bool) -> None:
    ir, x_stream, out_stream, w = counter_ir(transfers=3)
    session = popxl.Session(ir, optimize=optimize)
    assert session.expected_inputs() == [x_stream]
    xs = np.arange(6, dtype=np.float32).reshape(3, 2)
    with session:
        out = session.run({x_stream: xs})
    assert out[out_stream].shape == (3, 2)
    np.testing.assert_array_equal(out[out_stream], np.cumsum(xs, axis=0))
    with session, pytest.raises(errors.StreamInputError, match=r"\(3, 2\).*num_host_transfers"):
        session.run({x_stream: np.ones(2, np.float32)})


def test_run_with_outputs_fills_given_arrays() -> None:
    ir, x_stream, out_stream, _ = counter_ir()
    session = popxl.Session(ir)
    target = np.zeros(2, np.float32)
    with session:
        session.run_with_outputs({x_stream: np.full(2, 4.0, np.float32)}, {out_stream: target})
        with pytest.raises(errors.StreamInputError):
            session.run_with_outputs({x_stream: np.ones(2, np.float32)},
                                     {out_stream: np.zeros(3, np.float32)})
    np.testing.assert_array_equal(target, 4.0)


def test_stream_input_errors_name_stream_and_specs() -> None:
    ir, x_stream, _, _ = counter_ir()
    session = popxl.Session(ir)
    with session:
        with pytest.raises(errors.StreamInputError, match=r"missing \['x'\]"):
            session.run({})
        with pytest.raises(errors.StreamInputError, match="unexpected"):
            session.run({x_stream: np.ones(2, np.float32), "bogus": 1})
        with pytest.raises(errors.StreamInputError, match=r"'x' .*f32\[2\].*got \(3,\)"):
            session.run({x_stream: np.ones(3, np.float32)})
        with pytest.raises(errors.StreamInputError, match="expects dtype float32.*int32"):
            session.run({x_stream: np.ones(2, np.int32)})
        with pytest.raises(errors.StreamInputError):
            session.run({x_stream: np.ones(2)}, downcast_inputs=False)
        session.run({x_stream: [1.0, 2.0]})  # float64 host data is downcast by default


def test_tensor_data_accessors() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.ones(2), name="w")
        c = popxl.constant(np.array([3, 4], np.int32), name="c")
        y = w * 2.0
    session = popxl.Session(ir)
    np.testing.assert_array_equal(session.get_tensors_data([w, c])[c], [3, 4])
    with pytest.raises(TypeError, match="not of type Constant or Variable"):
        session.get_tensor_data(y)
    with pytest.raises(TypeError):
        session.write_variable_data(c, np.zeros(2, np.int32))
    with pytest.raises(TypeError, match="f32"):
        session.write_variable_data(w, np.zeros(2, np.float64))
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        session.write_variable_data(w, np.zeros(3, np.float32))
    data = session.get_tensor_data(w)
    data[:] = 5.0
    np.testing.assert_array_equal(session.get_tensor_data(w), 1.0)


def _failing_kernel(x: np.ndarray) -> np.ndarray:
    raise FloatingPointError("boom")


FAIL = OpDef("fail_for_test", same_spec, _failing_kernel)


@pytest.mark.parametrize("optimize", [True, False])
def test_failed_run_leaves_variables_unchanged(optimize: bool) -> None:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        w = popxl.variable(np.ones(3), name="w")
        ops.scaled_add_(w, popxl.constant(np.ones(3), popxl.float32), b=5.0)
        y = apply1(FAIL, [w])  # stored, so that dead-op removal keeps it
        ops.host_store(popxl.d2h_stream(y.shape, y.dtype, "y"), y)
    session = popxl.Session(ir, optimize=optimize)
    with session:
        with pytest.raises(errors.ExecutionError, match=r"fail_for_test.*test_session.py") as info:
            session.run()
        assert isinstance(info.value.__cause__, FloatingPointError)
        np.testing.assert_array_equal(session.get_tensor_data(w), 1.0)


def test_devices_and_frozen_ir() -> None:
    ir, *_ = counter_ir()
    with pytest.raises(errors.UnsupportedDeviceError, match="ipu_hw"):
        popxl.Session(ir, "ipu_hw")
    session = popxl.Session(ir, "ipu_model")
    assert session.device.model.tiles_per_ipu == 4
    with pytest.raises(errors.IrFrozenError), ir.main_graph:
        popxl.variable(np.zeros(1))


def test_generated_source_is_deterministic() -> None:
    sources = {popxl.Session(counter_ir(transfers=2)[0]).source for _ in range(2)}
    assert len(sources) == 1 and "def step" in sources.pop()


def test_unordered_inplace_ops_are_reported() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.zeros(2), name="w")
        one = popxl.constant(np.ones(2), popxl.float32)
        ops.var_updates.accumulate_(w, one)
        ops.var_updates.copy_var_update_(w, one)
    with pytest.raises(errors.SchedulingError, match=r"accumulate_.*copy_var_update_.*in_sequence"):
        popxl.Session(ir)


@pytest.mark.parametrize("optimize", [True, False])
def test_views_keep_value_semantics_around_inplace_updates(optimize: bool) -> None:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        x_stream = popxl.h2d_stream((2, 2), popxl.float32, "x")
        x = ops.host_load(x_stream)
        w = popxl.variable(np.arange(4).reshape(2, 2), popxl.float32, name="w")
        before = w.reshape((4,))        # a view taken before the update...
        ops.var_updates.accumulate_(w, x)
        after = w.reshape((4,))
        c = popxl.constant(np.ones(2), popxl.float32, name="c")
        bumped = ops.var_updates.accumulate_(c, popxl.constant(np.ones(2), popxl.float32))
        ops.relu_(x)                     # must not write into the caller's input array
        streams = [popxl.d2h_stream(t.shape, t.dtype, f"o{i}")
                   for i, t in enumerate((before, after, bumped))]
        for s, t in zip(streams, (before, after, bumped)):
            ops.host_store(s, t)
    session = popxl.Session(ir, optimize=optimize)
    xv = -np.ones((2, 2), np.float32)
    with session:
        for _ in range(2):
            out = session.run({x_stream: xv})
    np.testing.assert_array_equal(out[streams[0]], np.arange(4) - 1.0)  # ...keeps its value
    np.testing.assert_array_equal(out[streams[1]], np.arange(4) - 2.0)
    np.testing.assert_array_equal(out[streams[2]], 2.0)  # the constant is fresh every run
    np.testing.assert_array_equal(xv, -1.0)
