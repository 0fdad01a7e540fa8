"""PopXL's behaviour at the edges: the built-in exception type PopXL raises (xlgraph's errors
subclass it) with PopXL's key phrase, and the inputs PopXL accepts."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops


def _ir_with_variable():
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.ones(2, np.float32), name="v")
        t = v + 1.0
        s = popxl.d2h_stream((2,), popxl.float32, "out")
        ops.host_store(s, t)
    return ir, v, t, s


def _subgraph_variable() -> None:
    ir = popxl.Ir()
    g = ir.create_empty_graph("sub")
    with g:
        popxl.variable(np.ones(2, np.float32))


def _call_with_extra_input() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32))
        g = ir.create_graph(lambda t: t + 1.0, x)
        ops.call(g, x, x)


def _call_with_parent_tensor_inside() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32))
        ir.create_graph(lambda t: t + x, x)


def _run_detached() -> None:
    ir, *_ = _ir_with_variable()
    popxl.Session(ir).run()


def _tensor_data_of_intermediate() -> None:
    ir, _, t, _ = _ir_with_variable()
    popxl.Session(ir).get_tensor_data(t)


def _write_wrong_dtype() -> None:
    ir, v, *_ = _ir_with_variable()
    popxl.Session(ir).write_variable_data(v, np.ones(2, np.int32))


def _write_wrong_shape() -> None:
    ir, v, *_ = _ir_with_variable()
    popxl.Session(ir).write_variable_data(v, np.ones(3, np.float32))


def _unexpected_input() -> None:
    ir, *_ = _ir_with_variable()
    with ir.main_graph:
        other = popxl.h2d_stream((2,), popxl.float32, "other")
    with popxl.Session(ir) as session:
        session.run({other: np.ones(2, np.float32)})


def _module_without_build() -> None:
    popxl.Module().build()


def _len_of_scalar() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        len(popxl.variable(np.float32(1)))


def _bad_index() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        popxl.variable(np.ones(3, np.float32))["a"]


def _graph_contains_non_tensor() -> None:
    ir = popxl.Ir()
    1 in ir.main_graph  # noqa: B015 - the check is the test


def _no_current_graph() -> None:
    popxl.gcg()


def _bad_collective_op() -> None:
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        ops.collectives.replicated_all_reduce(popxl.variable(np.ones(2, np.float32)), op="bad")


def _in_sequence_none() -> None:
    with popxl.in_sequence(None):
        pass


def _repeat_negative() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32))
        ops.repeat(ir.create_graph(lambda t: t + 1.0, x), -1, x)


def _session_of_an_empty_ir() -> None:
    popxl.Session(popxl.Ir(), "ipu_model")


def _ir_compared_with_int() -> None:
    popxl.Ir() == 1  # noqa: B015 - the comparison is the test


# (case, PopXL's exception type, PopXL's key phrase)
EDGES: list[tuple[Callable[[], None], type[Exception], str]] = [
    (_subgraph_variable, ValueError, "main graph"),
    (_call_with_extra_input, ValueError, "inputs"),
    (_call_with_parent_tensor_inside, ValueError, "not in the current Graph"),
    (_run_detached, ValueError, "Must be attached to device before calling a runtime function"),
    (_tensor_data_of_intermediate, TypeError, "is not of type Constant or Variable."),
    (_write_wrong_dtype, TypeError, "dtype"),
    (_write_wrong_shape, ValueError, "shape"),
    (_unexpected_input, ValueError, "Unexpected"),
    (_module_without_build, NotImplementedError, "build"),
    (_len_of_scalar, ValueError, "scalar"),
    (_bad_index, TypeError, "index"),
    (_graph_contains_non_tensor, TypeError, "Tensor"),
    (_no_current_graph, RuntimeError, "graph"),
    (_bad_collective_op, ValueError, "add"),
    (_in_sequence_none, TypeError, "in_sequence"),
    (_repeat_negative, ValueError, "repeat_count"),
    (_ir_compared_with_int, TypeError, "Ir"),
    (_session_of_an_empty_ir, RuntimeError, "add operations"),
]


@pytest.mark.parametrize("case, kind, phrase", EDGES, ids=[e[0].__name__ for e in EDGES])
def test_error_type_and_phrase_as_popxl(case: Callable[[], None], kind: type[Exception],
                                        phrase: str) -> None:
    with pytest.raises(kind) as info:
        case()
    assert phrase.lower() in str(info.value).lower()


# -- inputs PopXL accepts ----------------------------------------------------------------------
@pytest.mark.parametrize("value", [np.float32(3.0), np.array(3.0, np.float32), 3.0])
def test_a_shape_1_stream_takes_a_scalar(value) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x_s = popxl.h2d_stream((1,), popxl.float32, "x")
        out = popxl.d2h_stream((1,), popxl.float32, "out")
        ops.host_store(out, ops.host_load(x_s) * 2.0)
    with popxl.Session(ir) as session:
        assert session.run({x_s: value})[out].tolist() == [6.0]
        with pytest.raises(ValueError, match="shape"):
            session.run({x_s: np.ones(2, np.float32)})


def test_memmap_variables_are_written_back_by_weights_to_host(tmp_path) -> None:
    path = tmp_path / "w.bin"
    mm = np.memmap(path, np.float32, "w+", shape=(2, 3))
    mm[:] = 1.0
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(mm, name="w")
        ops.var_updates.accumulate_(w, popxl.constant(np.full((2, 3), 2.0, np.float32)))
    with popxl.Session(ir) as session:
        session.run()
        assert mm[0, 0] == 1.0  # the device holds the new value until weights come back
        session.weights_to_host()
    np.testing.assert_array_equal(mm, 3.0)
    mm.flush()
    np.testing.assert_array_equal(np.fromfile(path, np.float32), 3.0)


# -- weight access for every kind of tensor PopXL allows ----------------------------------------
def test_tensor_data_of_constants_grouped_all_replicas_remote_and_sharded() -> None:
    ir = popxl.Ir(replication=4)
    groups = ir.replica_grouping(group_size=2)  # two groups: replicas (0, 1) and (2, 3)
    with ir.main_graph:
        c = popxl.constant(np.arange(3, dtype=np.float32), name="c")
        grouped = popxl.variable(np.array([[1.0, 1.0], [2.0, 2.0]], np.float32), name="grouped",
                                 replica_grouping=groups)
        every = popxl.variable(np.array([5.0], np.float32), name="every",
                               retrieval_mode="all_replicas")
        buffer = popxl.remote_buffer((2,), popxl.float32, 2)
        remote = popxl.remote_variable(np.array([7.0, 8.0], np.float32), buffer, 1,
                                       name="remote")
        sharded, shard = popxl.replica_sharded_variable(np.arange(8, dtype=np.float32),
                                                        name="sharded")
        ops.var_updates.accumulate_(grouped, popxl.constant(np.ones(2, np.float32)))
        ops.var_updates.accumulate_(every, popxl.constant(np.ones(1, np.float32)))
        ops.remote_store(buffer, 1, ops.remote_load(buffer, 1) * 2.0)
        shard = ops.var_updates.accumulate_(shard, popxl.constant(np.ones(2, np.float32)))
        ops.remote_store(sharded.remote.buffer, 0, shard)
    session = popxl.Session(ir)
    before = session.get_tensors_data([c, grouped, every, remote, sharded])
    np.testing.assert_array_equal(before[c], [0, 1, 2])
    np.testing.assert_array_equal(before[every], [[5.0]] * 4)  # one row per replica
    with session:
        session.run()
    after = session.get_tensors_data([grouped, every, remote, sharded])
    np.testing.assert_array_equal(after[grouped], [[2.0, 2.0], [3.0, 3.0]])
    np.testing.assert_array_equal(after[every], [[6.0]] * 4)
    np.testing.assert_array_equal(after[remote], [14.0, 16.0])
    np.testing.assert_array_equal(after[sharded], np.arange(8) + 1.0)
    session.write_variables_data({grouped: np.zeros((2, 2), np.float32),
                                  remote: np.ones(2, np.float32),
                                  sharded: np.full(8, 4.0, np.float32)})
    with pytest.raises(NotImplementedError):  # all_replicas retrieval of a group of 4
        session.write_variable_data(every, np.array([9.0], np.float32))
    got = session.get_tensors_data([grouped, every, remote, sharded])
    np.testing.assert_array_equal(got[grouped], 0.0)
    np.testing.assert_array_equal(got[every], [[6.0]] * 4)
    np.testing.assert_array_equal(got[remote], 1.0)
    np.testing.assert_array_equal(got[sharded], 4.0)
    with pytest.raises(TypeError, match="is not of type Variable"):
        session.write_variable_data(c, np.zeros(3, np.float32))


def test_tensor_data_messages_are_popxls_sentences() -> None:
    """PopXL: ``get_tensor_data`` takes Variables and Constants ("Tensor <id> is not of type
    Constant or Variable."), ``write_variable_data`` Variables only ("Tensor <id> is not of type
    Variable."); a constant's data is its value."""
    ir = popxl.Ir()
    with ir.main_graph:
        c = popxl.constant(np.arange(3, dtype=np.float32), name="c")
        t = ops.add(c, c)
        ops.host_store(popxl.d2h_stream((3,), popxl.float32, "out"), t)
    session = popxl.Session(ir)
    np.testing.assert_array_equal(session.get_tensor_data(c), [0, 1, 2])
    with pytest.raises(TypeError) as info:
        session.write_variable_data(c, np.zeros(3, np.float32))
    assert str(info.value) == "Tensor c is not of type Variable."
    with pytest.raises(TypeError) as info:
        session.write_variables_data({c: np.zeros(3, np.float32)})
    assert str(info.value) == "Tensor c is not of type Variable."
    with pytest.raises(TypeError) as info:
        session.get_tensors_data([c, t])
    assert str(info.value) == f"Tensor {t.id} is not of type Constant or Variable."


def test_grouped_all_replicas_variables_read_per_replica_and_refuse_writes() -> None:
    """PopXL stores one value per replica group: an ``all_replicas`` read of a grouped variable
    repeats each group's value for its replicas; writing such a variable (groups of more than
    one replica) raises NotImplementedError, after the dtype (TypeError) and shape
    (ValueError, ``shape_on_host`` only) checks."""
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        v = popxl.variable(np.array([[1.0], [2.0]], np.float32), name="v",
                           replica_grouping=ir.replica_grouping(stride=2, group_size=2),
                           retrieval_mode="all_replicas")  # groups (0, 2) and (1, 3)
        single = popxl.variable(np.arange(4, dtype=np.float32).reshape(4, 1), name="single",
                                replica_grouping=ir.replica_grouping(group_size=1),
                                retrieval_mode="all_replicas")
        ops.var_updates.accumulate_(v, popxl.constant(np.ones(1, np.float32)))
    assert v.shape_on_host == (2, 1)
    session = popxl.Session(ir)
    np.testing.assert_array_equal(session.get_tensor_data(v), [[1], [2], [1], [2]])
    with session:
        session.run()
        np.testing.assert_array_equal(session.get_tensor_data(v), [[2], [3], [2], [3]])
        with pytest.raises(TypeError):
            session.write_variable_data(v, np.array([[5], [6]], np.int32))
        with pytest.raises(ValueError):
            session.write_variable_data(v, np.array([[7.0], [8.0], [7.0], [8.0]], np.float32))
        with pytest.raises(NotImplementedError):
            session.write_variable_data(v, np.array([[5.0], [6.0]], np.float32))
        with pytest.raises(NotImplementedError):
            session.write_variables_data({v: np.array([[5.0], [6.0]], np.float32)})
        session.write_variable_data(single, np.full((4, 1), 9.0, np.float32))  # groups of one
        np.testing.assert_array_equal(session.get_tensor_data(single), np.full((4, 1), 9.0))
    np.testing.assert_array_equal(session.get_tensor_data(v), [[2], [3], [2], [3]])


def test_names_popxl_never_defined_fail_as_in_popxl() -> None:
    """Some of PopXL's own documentation programs call names PopXL does not have; they fail
    here the same way instead of running on an invented name."""
    from xlgraph import dtypes

    with pytest.raises(AttributeError):
        ops.matmul_  # noqa: B018 - the access is the test
    with pytest.raises(AttributeError):
        dtypes.int  # noqa: B018
    ir = popxl.Ir()
    with ir.main_graph, pytest.raises(TypeError, match="grouping"):
        popxl.variable(np.ones(2, np.float32), grouping=ir.replica_grouping())


def test_calling_a_grad_graph_info_says_to_pass_its_graph() -> None:
    from xlgraph.transforms import autodiff

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32))
        grad = autodiff(ir.create_graph(lambda t: ops.sin(t), x))
        with pytest.raises(TypeError) as info:
            ops.call(grad, x, x)
    text = str(info.value)
    assert "got a GradGraphInfo; pass its .graph" in text and len(text) < 300
