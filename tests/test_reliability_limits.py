"""Limits that are limits (issue 22, item 10) and the smaller items' clear errors.

Each bad value used to be accepted (``Ir(replication=2.5)`` became 2, ``"2"`` and ``True`` passed,
``IPUModel(memory_bytes_per_tile=-1)`` built a model, ``xlgraph-run --num-instances 0`` or
``--timeout -5`` started a job) or failed far from its cause. Each now raises with the valid range
or names the stream / the user's line.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import checkpoint, ops
from xlgraph.dist.run import mpiexec_command
from xlgraph.errors import (
    ArgumentError,
    AutodiffError,
    CheckpointError,
    ShapeError,
    StreamInputError,
)

F32 = popxl.float32
HERE = os.path.basename(__file__)


@pytest.mark.parametrize("bad", [2.5, "2", True, 0, -1, None])
def test_ir_replication_must_be_a_whole_number(bad) -> None:
    with pytest.raises(ArgumentError, match=r"replication_factor must be a whole number >= 1"):
        popxl.Ir(replication=bad)
    ir = popxl.Ir()
    with pytest.raises(ArgumentError, match=r">= 1"):
        ir.replication_factor = bad
    assert popxl.Ir(replication=np.int64(2)).replication_factor == 2


@pytest.mark.parametrize("knob, bad, rule", [
    ("memory_bytes_per_tile", -1, "whole number >= 1"),
    ("memory_bytes_per_tile", 1.5, "whole number >= 1"),
    ("num_ipus", 0, "whole number >= 1"),
    ("tiles_per_ipu", True, "whole number >= 1"),
    ("num_worker_contexts", 0, "whole number >= 1"),
    ("sync_cycles", -3, "whole number >= 0"),
    ("tile_clock_frequency", 0.0, "finite number > 0"),
    ("exchange_bytes_per_cycle", float("inf"), "finite number > 0"),
    ("host_bytes_per_second", -1e9, "finite number > 0"),
    ("host_sync_seconds", float("nan"), "finite number >= 0"),
])
def test_ipu_model_knobs_have_ranges(knob: str, bad, rule: str) -> None:
    with pytest.raises(ArgumentError, match=f"IPUModel {knob} must be a {rule}"):
        popxl.IPUModel(**{knob: bad})
    assert popxl.IPUModel(host_sync_seconds=0, sync_cycles=0).sync_cycles == 0


@pytest.mark.parametrize("flag", ["--num-instances", "--num-replicas", "--timeout"])
@pytest.mark.parametrize("bad", ["0", "-5", "2.5", "x"])
def test_xlgraph_run_counts_must_be_at_least_one(flag: str, bad: str, capsys) -> None:
    args = {"--num-instances": "1", "--num-replicas": "2", "--timeout": "10", flag: bad}
    with pytest.raises(SystemExit) as info:
        mpiexec_command([*(x for kv in args.items() for x in kv), "--mpiexec", "m", "prog"])
    assert info.value.code == 2
    assert f"argument {flag}: must be a whole number from 1 to 2147483647, got {bad!r}" in \
        capsys.readouterr().err


def _stream_session() -> tuple[popxl.Session, popxl.HostToDeviceStream]:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream((2,), F32, "images")
        out = popxl.d2h_stream((2,), F32, "out")
        ops.host_store(out, ops.host_load(x) * 2.0)
    return popxl.Session(ir), x


def test_big_endian_data_names_the_stream() -> None:
    session, x = _stream_session()
    with session, pytest.raises(StreamInputError, match="stream 'images'.*non-native byte order"):
        session.run({x: np.ones(2, ">f4")})


def test_run_with_a_list_explains_the_dict() -> None:
    session, x = _stream_session()
    with session, pytest.raises(StreamInputError, match=r"run takes a dict \{h2d stream: array"):
        session.run([np.ones(2, np.float32)])


def test_float64_data_too_large_for_float32_is_refused() -> None:
    session, x = _stream_session()
    with session:
        with pytest.raises(StreamInputError, match="stream 'images'.*1e\\+300 does not fit"):
            session.run({x: np.array([1.0, 1e300])})
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no overflow warning for data that fits
            out = session.run({x: np.array([np.inf, -2.0])})
    np.testing.assert_array_equal(next(iter(out.values())), [np.inf, -4.0])


def test_a_npy_file_is_not_a_checkpoint(tmp_path) -> None:
    path = tmp_path / "w.npy"
    np.save(path, np.arange(3.0))
    with pytest.raises(CheckpointError, match="w.npy is not a checkpoint"):
        checkpoint.load(path)


def test_no_current_graph_names_the_user_line() -> None:
    with pytest.raises(RuntimeError, match=f"no current graph.*\\[at {HERE}:"):
        popxl.variable(np.ones(2, np.float32))


def test_stream_shape_errors_name_the_user_line() -> None:
    with popxl.Ir().main_graph, pytest.raises(ArgumentError, match=f"\\[at {HERE}:"):
        popxl.h2d_stream((-1,), F32, "x")


def test_autodiff_of_the_main_graph_names_the_user_line() -> None:
    ir = popxl.Ir()
    with pytest.raises(AutodiffError, match=f"main graph cannot.*\\[at {HERE}:"):
        popxl.transforms.autodiff(ir.main_graph)


@pytest.mark.parametrize("shape, what", [((2**40, 2**40), "elements"), ((-1, 2), ">= 0")])
def test_init_of_an_impossible_shape_is_refused_where_it_is_built(shape, what) -> None:
    """``(2**40, 2**40)`` overflowed int64 (``nelms`` 0) and failed only at run time."""
    with popxl.Ir().main_graph, pytest.raises(ShapeError, match=f"{what}.*\\[created at {HERE}:"):
        ops.init(shape, F32)


def test_autodiff_says_when_a_required_gradient_has_no_path() -> None:
    ir = popxl.Ir()
    g = ir.create_empty_graph("g", unique_suffix=False)
    with g:
        a = popxl.graph_input((2,), F32, "a")
        b = popxl.graph_input((2,), F32, "b")
        popxl.graph_output(a * 2.0)
    with pytest.warns(UserWarning, match=r"autodiff\('g'\): no path .* \['b'\]; their gradients "
                                         r"are zeros"):
        popxl.transforms.autodiff(g, grads_required=[a, b])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        popxl.transforms.autodiff(g, grads_required=[a])


@pytest.mark.parametrize("optimize", [True, False])
def test_integer_division_rounds_toward_zero_and_refuses_zero(optimize: bool) -> None:
    """A zero divisor gave INT_MIN (a float inf cast to int32), and the quotient was a float64
    array inside an int32 program."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream((4,), popxl.int32, "x")
        z = popxl.h2d_stream((4,), popxl.int32, "z")
        q = ops.host_load(x) / ops.host_load(z)
        out = popxl.d2h_stream((4,), popxl.int32, "q")
        ops.host_store(out, q + 1)
    a = np.array([7, -7, 7, -7], np.int32)
    b = np.array([2, 2, -2, -2], np.int32)
    with popxl.Session(ir, optimize=optimize) as session:
        got = session.run({x: a, z: b})[out]
        np.testing.assert_array_equal(got, np.trunc(a / b).astype(np.int32) + 1)
        with pytest.raises(popxl.errors.ExecutionError,
                           match=r"run failed in div\..*ZeroDivisionError: integer division by "
                                 r"zero \(1 zero divisor"):
            session.run({x: a, z: np.array([2, 0, 1, 1], np.int32)})
