"""``Session(..., check_numerics=True)`` stops at the first NaN or Inf (issue 9)."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops
from xlgraph.errors import ExecutionError, NumericsError

F32 = popxl.float32


def _ir() -> tuple[popxl.Ir, object, object, popxl.Tensor]:
    """``count += 1``, then ``y = sqrt(x) * 2`` in a repeat body, then ``y - 1``."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        xs = popxl.h2d_stream((3,), F32, "x")
        ys = popxl.d2h_stream((3,), F32, "y")
        count = popxl.variable(np.zeros((), np.float32), F32, "count")
        ops.var_updates.accumulate_(count, popxl.constant(1.0, F32))
        body = ir.create_graph(lambda t: ops.sqrt(t) * 2.0, popxl.TensorSpec((3,), F32))
        (y,) = ops.repeat(body, 1, ops.host_load(xs))
        ops.host_store(ys, y - 1.0)
    return ir, xs, ys, count


def test_the_first_nan_names_the_op_and_the_line() -> None:
    ir, xs, ys, count = _ir()
    session = popxl.Session(ir, check_numerics=True)
    with session:
        np.testing.assert_allclose(session.run({xs: np.array([1, 4, 9], np.float32)})[ys],
                                   [1, 3, 5])
        with pytest.raises(ExecutionError) as info:
            session.run({xs: np.array([1, -4, 9], np.float32)})
    message = str(info.value)
    assert message.startswith("run failed in sqrt.")
    assert "test_reliability_numerics.py:23" in message  # the line that created the op
    assert "nan at index (1,)" in message and "every input was finite" in message
    assert isinstance(info.value.__cause__, NumericsError)
    assert session.get_tensor_data(count) == 1.0  # the failed run changed nothing


def test_non_finite_host_data_and_inputs_are_reported_as_such() -> None:
    ir, xs, _, _ = _ir()
    session = popxl.Session(ir, check_numerics=True)
    with session, pytest.raises(ExecutionError, match="stream 'x' delivered inf at index"):
        session.run({xs: np.array([1, np.inf, 9], np.float32)})
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.array([1.0, np.nan], np.float32), name="v")
        ops.host_store(popxl.d2h_stream((2,), F32, "y"), v * 2.0)
    session = popxl.Session(ir, check_numerics=True)
    with session, pytest.raises(ExecutionError, match=r"inputs \['v f32\[2\]'\] were not finite"):
        session.run({})


def test_without_the_mode_nans_pass_silently() -> None:
    ir, xs, ys, _ = _ir()
    session = popxl.Session(ir)
    with session, np.errstate(invalid="ignore"):
        assert np.isnan(session.run({xs: np.array([1, -4, 9], np.float32)})[ys][1])


def test_check_numerics_runs_replicas_and_names_the_replica() -> None:
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        xs = popxl.h2d_stream((3,), F32, "x")
        ys = popxl.d2h_stream((3,), F32, "y")
        ops.host_store(ys, ops.sqrt(ops.host_load(xs)) * 2.0)
    session = popxl.Session(ir, check_numerics=True)
    with session:
        good = np.array([[1, 4, 9], [16, 25, 36]], np.float32)
        np.testing.assert_array_equal(session.run({xs: good})[ys], np.sqrt(good) * 2)
        with pytest.raises(ExecutionError, match=r"run failed in sqrt.*nan at index \(1, 2\)"):
            session.run({xs: np.array([[1, 4, 9], [16, 25, -36]], np.float32)})
