"""Regression tests: bad programs and bad data are refused with clear errors instead of being
accepted silently (issue 9, items 10 to 13)."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops
from xlgraph.errors import (
    ArgumentError,
    DTypeError,
    ExecutionError,
    GraphMismatchError,
    ShapeError,
    StreamInputError,
    XlgraphError,
)

F32 = popxl.float32
HERE = "test_reliability_validation.py:"


# -- item 10: host transfers per run --------------------------------------------------------------
def _transfers_ir(transfers: int, build: Callable[[object, object], None]) -> popxl.Ir:
    ir = popxl.Ir()
    ir.num_host_transfers = transfers
    with ir.main_graph:
        build(popxl.h2d_stream((2,), F32, "x"), popxl.d2h_stream((2,), F32, "y"))
    return ir


@pytest.mark.parametrize("transfers, build, wrong", [
    (4, lambda x, y: ops.host_store(y, ops.host_load(x)), "host_load of stream 'x' runs 1"),
    (1, lambda x, y: ops.host_store(y, ops.host_load(x) + ops.host_load(x)),
     "host_load of stream 'x' runs 2"),
    (1, lambda x, y: [ops.host_store(y, t) for t in [ops.host_load(x)] * 2],
     "host_store of stream 'y' runs 2"),
])
@pytest.mark.parametrize("optimize", [True, False])
def test_transfers_per_run_other_than_num_host_transfers_warn(transfers, build, wrong,
                                                              optimize) -> None:
    """PopXL never checks the count: the Session warns, and runs."""
    ir = _transfers_ir(transfers, build)
    with pytest.warns(UserWarning, match=f"num_host_transfers={transfers}.*{wrong}"):
        popxl.Session(ir, optimize=optimize)


@pytest.mark.parametrize("optimize", [True, False])
def test_fewer_loads_than_transfers_read_the_first_slices_and_leave_zeros(optimize) -> None:
    """As the BERT SQuAD inference benchmark: ``num_host_transfers = 4`` and one load and one
    store per run; each execution takes the next slice, unstored output slices are zero, and
    rows past ``num_host_transfers`` are not read."""
    ir = _transfers_ir(4, lambda x, y: ops.host_store(y, ops.host_load(x) * 2.0))
    with pytest.warns(UserWarning, match="runs 1 time"):
        session = popxl.Session(ir, optimize=optimize)
    (x,) = session.expected_inputs()
    assert session._extra_input_dims == (4,) and session._full_input_shape(x.shape) == (4, 2)
    data = np.arange(12, dtype=np.float32).reshape(6, 2)  # at least 4 rows
    with session:
        (out,) = session.run({x: data}).values()
        np.testing.assert_array_equal(out, [data[0] * 2, [0, 0], [0, 0], [0, 0]])
        with pytest.raises(ValueError, match=r"Dimension 0 \(3\) for the array provided for "
                           r"input stream x is not large enough. It should be at least of size "
                           r"num_host_transfers = 4"):
            session.run({x: data[:3]})


def test_repeat_iterations_count_as_transfers() -> None:
    def build(x, y) -> None:
        ir = popxl.gir()
        body = ir.create_graph(lambda: ops.host_store(y, ops.host_load(x) * 2.0))
        ops.repeat(body, 3)

    data = np.arange(6, dtype=np.float32).reshape(3, 2)
    session = popxl.Session(_transfers_ir(3, build))
    with session:
        (out,) = session.run({session.expected_inputs()[0]: data}).values()
    np.testing.assert_array_equal(out, data * 2)
    with pytest.warns(UserWarning, match="runs 3 time"):
        popxl.Session(_transfers_ir(2, build))


def test_conditional_arms_that_transfer_differently_warn() -> None:
    def build(x, y) -> None:
        ir = popxl.gir()
        then = ir.create_graph(lambda: ops.host_store(y, ops.host_load(x)))
        other = ir.create_graph(lambda: None)
        ops.conditional(popxl.constant(True), then, other)

    with pytest.warns(UserWarning, match="branches make different host transfers"):
        popxl.Session(_transfers_ir(1, build))


# -- item 11: values and counts that do not fit ---------------------------------------------------
def _copy_ir(dtype) -> tuple[popxl.Ir, object, object]:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream((2,), dtype, "x")
        y = popxl.d2h_stream((2,), dtype, "y")
        ops.host_store(y, ops.host_load(x))
    return ir, x, y


def test_int64_data_outside_int32_is_refused() -> None:
    ir, x, y = _copy_ir(popxl.int32)
    session = popxl.Session(ir)
    with session:
        with pytest.raises(StreamInputError, match="4294967301 does not fit in int32"):
            session.run({x: np.array([2**32 + 5, 1], np.int64)})
        np.testing.assert_array_equal(session.run({x: np.array([-7, 1], np.int64)})[y], [-7, 1])
    with popxl.Ir().main_graph, pytest.raises(ValueError, match="does not fit in int32"):
        popxl.variable(np.array([2**40]))


@pytest.mark.parametrize("build", [
    lambda p, lab: ops.nll_loss(p, lab),
    lambda p, lab: ops.nll_loss_with_softmax_grad(p, lab)[0],
])
@pytest.mark.parametrize("optimize", [True, False])
def test_negative_labels_without_ignore_index_are_out_of_range(build, optimize) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        probs = popxl.variable(np.full((2, 3), 1 / 3, np.float32))
        labels = popxl.h2d_stream((2,), popxl.int32, "labels")
        loss = popxl.d2h_stream((), F32, "loss")
        ops.host_store(loss, build(probs, ops.host_load(labels)))
    session = popxl.Session(ir, optimize=optimize)
    with session:
        for bad in ([-1, 0], [0, 3]):
            with pytest.raises(ExecutionError, match="label .*out of range"):
                session.run({labels: np.array(bad, np.int32)})
        good = session.run({labels: np.array([2, 0], np.int32)})[loss]
    np.testing.assert_allclose(good, np.log(3.0), rtol=1e-6)


@pytest.mark.parametrize("value", [0, -3, 2.5, True, "4"])
def test_num_host_transfers_must_be_a_positive_whole_number(value) -> None:
    with pytest.raises(ArgumentError, match="num_host_transfers must be a whole number >= 1"):
        popxl.Ir().num_host_transfers = value


def test_counts_and_sizes_are_checked_at_the_call() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        g = ir.create_graph(lambda t: t + 1.0, popxl.TensorSpec((), F32))
        for count in (2.5, 0, -1):
            with pytest.raises(ArgumentError, match=f"repeat.*got {count}.*{HERE}"):
                ops.repeat(g, count, popxl.constant(0.0))
        with pytest.raises(ArgumentError, match=r"stream shape \(-2, 3\)"):
            popxl.h2d_stream((-2, 3), F32)
        with pytest.raises(ArgumentError, match=r"stream shape \(2.5,\)"):
            popxl.d2h_stream((2.5,), F32)
        indices = popxl.constant(np.array([0, 1], np.int32))
        for classes in (-3, popxl.constant(0, popxl.int32)):
            with pytest.raises(ArgumentError, match=f"onehot num_classes.*{HERE}"):
                ops.onehot(indices, classes, popxl.constant(np.array([0.0, 1.0], np.float32)))


# -- item 12: every build-time misuse names the op and the user's line ---------------------------
MISUSES: dict[str, tuple[type, Callable[[popxl.Tensor], object]]] = {
    "reshape": (ShapeError, lambda t: t.reshape((7,))),
    "softmax": (ShapeError, lambda t: ops.softmax(t, axis=5)),
    "sum": (ShapeError, lambda t: ops.sum(t, 4)),
    "split": (ShapeError, lambda t: ops.split(t, 4, axis=1)),
    "squeeze": (ShapeError, lambda t: ops.squeeze(t, [0])),
    "cast": (ArgumentError, lambda t: ops.cast(t, "banana")),
    "add": (ArgumentError, lambda t: t + "x"),
    "slice": (ArgumentError, lambda t: ops.slice(t, start=0, stop=2, step=0, axis=0)),
    "dropout": (ArgumentError,
                lambda t: ops.dropout(t, popxl.constant(np.zeros(2, np.uint32)), p=1.5)),
    "mean": (ShapeError, lambda t: ops.mean(t, axis=(0, 0))),
    "transpose": (ShapeError, lambda t: ops.transpose(t, (0, 0))),
    "matmul": (ShapeError, lambda t: t @ t),
    "expand": (ShapeError, lambda t: ops.expand(t, (4, 4))),
}


@pytest.mark.parametrize("op_name", sorted(MISUSES))
def test_build_time_misuse_names_the_op_the_input_and_the_line(op_name: str) -> None:
    kind, misuse = MISUSES[op_name]
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(np.zeros((2, 3), np.float32), name="t")
        with pytest.raises(kind) as info:
            misuse(t)
    message = str(info.value)
    assert message.startswith(f"{op_name}: "), message
    assert "t f32[2,3]" in message and re.search(HERE + r"\d+\]$", message), message


def test_tensors_and_streams_of_another_ir_say_so() -> None:
    other = popxl.Ir()
    with other.main_graph:
        foreign = popxl.variable(np.zeros(2, np.float32), name="x")
        foreign_stream = popxl.h2d_stream((2,), F32, "x")
    ir, x, _ = _copy_ir(F32)
    with ir.main_graph:
        mine = popxl.variable(np.zeros(2, np.float32), name="x")
        with pytest.raises(GraphMismatchError, match=f"of another Ir.*{HERE}"):
            _ = mine + foreign
    session = popxl.Session(ir)
    with session, pytest.raises(StreamInputError, match=r"\['x'\] given belong to another Ir"):
        session.run({foreign_stream: np.zeros(2, np.float32)})


# -- item 13 ---------------------------------------------------------------------------------------
def test_a_graph_whose_function_raises_leaves_no_required_stream() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream((2,), F32, "x")
        y = popxl.d2h_stream((), F32, "y")

        def broken() -> popxl.Tensor:
            return ops.host_load(x).reshape((3,))

        with pytest.raises(XlgraphError):
            ir.create_graph(broken)
        ops.host_store(y, popxl.constant(1.0))
    session = popxl.Session(ir)
    assert session.expected_inputs() == []
    with session:
        assert session.run({})[y] == 1.0


def test_dtype_errors_stay_type_errors() -> None:
    """Wrapped errors keep their meaning for callers that catch the builtin types."""
    with popxl.Ir().main_graph:
        t = popxl.variable(np.zeros(2, np.float32))
        with pytest.raises(TypeError):
            ops.gather(t, popxl.constant(np.array([0.5], np.float32)))
        with pytest.raises(DTypeError):
            ops.gather(t, popxl.constant(np.array([0.5], np.float32)))
