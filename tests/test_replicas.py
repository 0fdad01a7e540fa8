"""Replicas in one process: host shapes, replicated and grouped variables, replica groupings,
and a replicated step equal to one run per replica."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph
from xlgraph import ops
from xlgraph.errors import StreamInputError
from xlgraph.lower.replicas import loops_over_replicas
from xlgraph.replica_grouping import ReplicaGrouping


def _double_ir(replicas: int, transfers: int):
    ir = xlgraph.Ir(replication=replicas)
    ir.num_host_transfers = transfers
    with ir.main_graph:
        s_in = xlgraph.h2d_stream((2, 3), xlgraph.float32, "x")
        s_out = xlgraph.d2h_stream((2, 3), xlgraph.float32, "y")
        body = ir.create_graph(lambda: ops.host_store(s_out, ops.host_load(s_in) * 2.0))
        ops.repeat(body, transfers)
    return ir, s_in, s_out


@pytest.mark.parametrize("replicas, transfers, lead", [
    (1, 1, ()), (1, 3, (3,)), (4, 1, (4,)), (2, 3, (3, 2)),
])
def test_stream_data_has_the_replica_axis_after_the_transfers(replicas, transfers, lead):
    ir, s_in, s_out = _double_ir(replicas, transfers)
    data = np.random.default_rng(0).normal(size=lead + (2, 3)).astype(np.float32)
    session = xlgraph.Session(ir)
    with session:
        out = session.run({s_in: data})[s_out]
        # too few transfers; PopXL takes extra transfer rows (5 of 3) and ignores them
        bad, words = ((2, 2, 3), "not large enough") if lead == (3,) else ((5, 2, 3), "replicas=")
        with pytest.raises(StreamInputError, match=words):
            session.run({s_in: np.zeros(bad, np.float32)})
    assert out.shape == lead + (2, 3)
    np.testing.assert_array_equal(out, data * 2)


def _train_step_ir(replicas: int, batch: int, w0: np.ndarray, reduce: bool):
    """A linear layer trained one SGD step per run; gradients all-reduced when ``reduce``."""
    ir = xlgraph.Ir(replication=replicas)
    with ir.main_graph, xlgraph.in_sequence():
        w = xlgraph.variable(w0, name="w")
        s_x = xlgraph.h2d_stream((batch, 4), xlgraph.float32, "x")
        s_loss = xlgraph.d2h_stream((), xlgraph.float32, "loss")

        def loss_fn(x, w):
            y = ops.gelu(x @ w)
            return ops.mean(y * y)

        graph = ir.create_graph(loss_fn, s_x.spec, w.spec)
        x = ops.host_load(s_x)
        site = ops.call_with_info(graph, x, w)
        grad = xlgraph.transforms.grad_of_call(site, wrt=[w])[w]
        if reduce:
            grad = ops.collectives.replicated_all_reduce(grad, "mean")
        ops.scaled_add_(w, grad, b=-0.5)
        ops.host_store(s_loss, site.outputs[0])
    return ir, w, s_x, s_loss


def test_replicas_equal_one_run_per_replica_without_collectives():
    rng = np.random.default_rng(1)
    w0 = rng.normal(size=(4, 3)).astype(np.float32)
    x = rng.normal(size=(3, 5, 4)).astype(np.float32)  # (replicas, batch, 4)
    ir, w, s_x, s_loss = _train_step_ir(3, 5, w0, reduce=False)
    w.retrieval_mode = "all_replicas"
    session = xlgraph.Session(ir)
    with session:
        losses = session.run({s_x: x})[s_loss]
    weights = session.get_tensor_data(w)
    assert losses.shape == (3,) and weights.shape == (3, 4, 3)
    for r in range(3):
        ir1, w1, s_x1, s_loss1 = _train_step_ir(1, 5, w0, reduce=False)
        single = xlgraph.Session(ir1, optimize=False)
        with single:
            np.testing.assert_allclose(losses[r], single.run({s_x1: x[r]})[s_loss1],
                                       rtol=1e-6)
        np.testing.assert_allclose(weights[r], single.get_tensor_data(w1), rtol=1e-6)


def test_replicas_with_mean_all_reduce_equal_one_replica_on_the_whole_batch():
    """Data parallel: 2 replicas of batch 4 train like 1 replica of batch 8, every op of the
    step runs once for both replicas (no per-replica loop), and the weight, updated with the
    all-reduced gradient only, is held once."""
    rng = np.random.default_rng(2)
    w0 = rng.normal(size=(4, 3)).astype(np.float32)
    x = rng.normal(size=(8, 4)).astype(np.float32)
    ir, w, s_x, s_loss = _train_step_ir(2, 4, w0, reduce=True)
    session = xlgraph.Session(ir)
    assert loops_over_replicas(session.executable.program) == []
    assert session.executable.held_once == {w}
    with session:
        losses = session.run({s_x: x.reshape(2, 4, 4)})[s_loss]
    ir1, w1, s_x1, s_loss1 = _train_step_ir(1, 8, w0, reduce=False)
    single = xlgraph.Session(ir1)
    with single:
        loss1 = single.run({s_x1: x})[s_loss1]
    np.testing.assert_allclose(losses.mean(axis=0), loss1, rtol=1e-5)
    np.testing.assert_allclose(session.get_tensor_data(w), single.get_tensor_data(w1),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("stride, group_size, expected", [
    (1, 2, [0, 0, 1, 1, 2, 2, 3, 3]), (2, 4, [0, 1, 0, 1, 0, 1, 0, 1]),
    (4, 2, [0, 1, 2, 3, 0, 1, 2, 3]), (1, None, [0] * 8),
])
def test_replica_grouping_assignments_follow_popxl(stride, group_size, expected):
    rg = xlgraph.Ir(replication=8).replica_grouping(stride, group_size)
    assert list(rg.assignment) == expected
    assert rg.num_groups * rg.group_size == 8
    assert rg.stride == (stride if rg.group_size > 1 else 1)


def test_replica_grouping_transpose_and_assignments():
    ir = xlgraph.Ir(replication=8)
    rg = ir.replica_grouping(1, 2)
    assert rg.transpose() == ir.replica_grouping(2, 4)
    assert ir.replica_grouping_from_assignments([0, 1, 1, 0, 2, 3, 3, 2]).groups == (
        (0, 3), (1, 2), (4, 7), (5, 6))
    with pytest.raises(ValueError, match="divide"):
        ir.replica_grouping(3, 2)
    with pytest.raises(ValueError, match="same size"):
        ir.replica_grouping_from_assignments([0, 0, 0, 1, 1, 1, 1, 1])
    with pytest.raises(ValueError, match="one group per replica"):
        ReplicaGrouping(4, [0, 1])


def test_grouped_variables_hold_one_value_per_group():
    ir = xlgraph.Ir(replication=4)
    rg = ir.replica_grouping(2, 2)  # groups {0, 2} and {1, 3}
    data = np.array([[1.0, 2.0], [10.0, 20.0]], np.float32)
    with ir.main_graph:
        v = xlgraph.variable(data, name="v", replica_grouping=rg)
        all_v = xlgraph.variable(data, name="all", replica_grouping=rg,
                                 retrieval_mode="all_replicas")
        plain = xlgraph.variable(np.ones(2, np.float32), name="plain")
        s_x = xlgraph.h2d_stream((2,), xlgraph.float32, "x")
        s_out = xlgraph.d2h_stream((2,), xlgraph.float32, "out")
        x = ops.host_load(s_x)
        ops.host_store(s_out, v + x)
        ops.var_updates.accumulate_(all_v, x)
    assert v.shape == (2,) and v.shape_on_host == (2, 2) and plain.shape_on_host == (2,)
    session = xlgraph.Session(ir)
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    with session:
        out = session.run({s_x: x})[s_out]
    np.testing.assert_array_equal(out, data[[0, 1, 0, 1]] + x)
    np.testing.assert_array_equal(session.get_tensor_data(v), data)
    np.testing.assert_array_equal(session.get_tensor_data(all_v), data[[0, 1, 0, 1]] + x)
    session.write_variable_data(v, np.zeros((2, 2), np.float32))
    np.testing.assert_array_equal(session.get_tensor_data(v), np.zeros((2, 2)))
    with pytest.raises(ValueError, match=r"shape \(2, 2\)"):
        session.write_variable_data(v, np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="leading dimension of 2"):
        with ir.main_graph:
            xlgraph.variable(np.zeros(3, np.float32), replica_grouping=rg)


def test_replication_factor_is_fixed_once_a_session_owns_the_ir():
    ir, _, _ = _double_ir(2, 1)
    xlgraph.Session(ir)
    assert ir.instance_replication_factor == 2
    with pytest.raises(RuntimeError, match="replication_factor"):
        ir.replication_factor = 4


def test_a_conditional_runs_when_replicas_agree_and_refuses_when_they_do_not():
    ir = xlgraph.Ir(replication=2)
    with ir.main_graph:
        s_flag = xlgraph.h2d_stream((), xlgraph.bool, "flag")
        s_x = xlgraph.h2d_stream((3,), xlgraph.float32, "x")
        s_out = xlgraph.d2h_stream((3,), xlgraph.float32, "out")
        double = ir.create_graph(lambda t: t * 2.0, s_x.spec)
        negate = ir.create_graph(lambda t: -t, s_x.spec)
        x = ops.host_load(s_x)
        (y,) = ops.conditional(ops.host_load(s_flag), double, negate, [x], [x])
        ops.host_store(s_out, y)
    session = xlgraph.Session(ir)
    x = np.ones((2, 3), np.float32)
    with session:
        out = session.run({s_flag: np.array([True, True]), s_x: x})[s_out]
        np.testing.assert_array_equal(out, x * 2)
        with pytest.raises(xlgraph.errors.ExecutionError, match="disagree"):
            session.run({s_flag: np.array([True, False]), s_x: x})


def test_calls_share_inputs_only_with_graphs_that_cannot_modify_them():
    """The replicated runtime passes call inputs without copies when the callee has no
    in-place op; a callee that modifies its by-value input still gets a copy."""
    ir = xlgraph.Ir(replication=2)
    with ir.main_graph, xlgraph.in_sequence():
        s_x = xlgraph.h2d_stream((3,), xlgraph.float32, "x")
        s_out = xlgraph.d2h_stream((3,), xlgraph.float32, "out")
        x = ops.host_load(s_x)
        bump = ir.create_graph(lambda t: ops.scaled_add_(t, t, b=1.0) * 1.0, s_x.spec)
        same = ir.create_graph(lambda t: t, s_x.spec)
        (doubled,) = ops.call(bump, x)
        (alias,) = ops.call(same, x)
        ops.scaled_add_(x, doubled, b=10.0)
        ops.host_store(s_out, alias + x)
    session = xlgraph.Session(ir)
    data = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    with session:
        out = session.run({s_x: data})[s_out]
    np.testing.assert_array_equal(out, data + (data + 20 * data))


def test_values_held_once_until_a_replica_write_and_dead_conditionals_still_check():
    """An ``init`` is held once until an in-place op writes a per-replica value into it; a
    0-d value written in place per replica; a conditional whose result nothing reads still
    checks that the replicas agree. Compiled and interpreted runs agree."""
    ir = xlgraph.Ir(replication=2)
    with ir.main_graph, xlgraph.in_sequence():
        s_x = xlgraph.h2d_stream((3,), xlgraph.float32, "x")
        s_acc = xlgraph.d2h_stream((3,), xlgraph.float32, "acc")
        s_top = xlgraph.d2h_stream((), xlgraph.float32, "top")
        x = ops.host_load(s_x)
        acc = ops.init((3,), xlgraph.float32)
        ops.var_updates.accumulate_(acc, x)
        top = ops.max(acc)
        ops.relu_(top)
        same = ir.create_graph(lambda t: t * 1.0, s_x.spec)
        ops.conditional(ops.greater(ops.sum(x), xlgraph.constant(0.0)), same, same, [x], [x])
        ops.host_store(s_acc, acc)
        ops.host_store(s_top, top)
    agree = np.array([[1, -2, 3], [4, 5, -6]], np.float32)
    differ = np.array([[1, 2, 3], [-4, -5, -6]], np.float32)
    for optimize in (True, False):
        session = xlgraph.Session(ir, optimize=optimize)
        with session:
            out = session.run({s_x: agree})
            np.testing.assert_array_equal(out[s_acc], agree)
            np.testing.assert_array_equal(out[s_top], [3, 5])
            with pytest.raises(xlgraph.errors.ExecutionError, match="disagree"):
                session.run({s_x: differ})
