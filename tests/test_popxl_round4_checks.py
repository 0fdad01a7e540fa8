"""PopXL behaviours programs check by exception type and wording, or through PopART's log:
the pow2-scaled fp8 ops' scale checks, concat of mixed dtypes, ``popart.getLogger`` and the
weights-to-host debug lines, and the ``popart`` enums programs pass."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops
from xlgraph import popart_compat as popart

pytest.importorskip("ml_dtypes", reason="the fp8 extra is not installed")


@pytest.fixture
def debug_log() -> Iterator[None]:
    popart.getLogger().setLevel("DEBUG")
    yield
    popart.getLogger().setLevel("WARN")


def _fp8(shape: tuple[int, ...]) -> popxl.Tensor:
    return popxl.variable(np.ones(shape, np.float32), popxl.float8_143)


@pytest.mark.parametrize("build", [
    lambda s: ops.matmul_pow2scaled(_fp8((2, 2)), _fp8((2, 2)), s),
    lambda s: ops.conv_pow2scaled(_fp8((1, 1, 3, 3)), _fp8((1, 1, 1, 1)), s),
    lambda s: ops.conv_transpose_pow2scaled(_fp8((1, 1, 3, 3)), _fp8((1, 1, 1, 1)), s),
    lambda s: ops.pow2scale_cast_to_fp8(popxl.variable(np.ones(2, np.float32)), s),
    lambda s: ops.pow2scale_cast_from_fp8(_fp8((2,)), s, popxl.float32),
])
def test_log2_scale_checks_as_popxl(build) -> None:
    with popxl.Ir().main_graph:
        with pytest.raises(ValueError, match="^Log2 scale argument must be a scalar tensor"):
            build(popxl.constant(np.zeros(1, np.int32)))
        with pytest.raises(TypeError, match="^Log2 scale tensor must be of type popxl.int32"):
            build(popxl.constant(np.int8(0)))
        assert build(popxl.constant(np.int32(0))) is not None


def test_scaled_matmul_checks_its_operands_first() -> None:
    with popxl.Ir().main_graph, pytest.raises(TypeError):
        ops.matmul_pow2scaled(popxl.variable(np.ones((2, 2), np.float32)), _fp8((2, 2)),
                              popxl.constant(np.zeros(1, np.int32)))


def test_concat_of_mixed_dtypes() -> None:
    with popxl.Ir().main_graph:
        a = popxl.variable(np.ones(2, np.float32))
        b = popxl.variable(np.ones(2, np.float16))
        for concat in (ops.concat, ops.concat_):
            with pytest.raises(TypeError,
                               match="^All inputs to a concat operation must have the same type:"):
                concat([a, b])


def test_weights_to_host_runs_once_per_run_and_logs_it(debug_log, capfd) -> None:
    """run -> get(v) -> get(w) -> get(v) is exactly one WeightsToHost; each writes PopART's two
    devicex debug lines."""
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.zeros(2, np.float32), name="v")
        w = popxl.variable(np.ones(2, np.float32), name="w")
        ops.var_updates.accumulate_(v, w)
    session = popxl.Session(ir, "ipu_model")
    capfd.readouterr()
    with session:
        session.run()
        session.get_tensor_data(v)
        np.testing.assert_array_equal(session.get_tensor_data(w), [1, 1])
        np.testing.assert_array_equal(session.get_tensor_data(v), [1, 1])
        err = capfd.readouterr().err
        assert err.count("Writing weights to host complete.") == 1
        assert " popart:devicex " in err and " D: Writing weights to host\n" in err
        session.write_variable_data(v, np.zeros(2, np.float32))  # weights_from_host: in sync
        session.get_tensor_data(v)
        session.run()
        session.get_tensor_data(v)
        assert capfd.readouterr().err.count("Writing weights to host complete.") == 1


def test_get_logger_levels(capfd) -> None:
    log = popart.getLogger()
    log.warn("shown at WARN")
    log.info("hidden at WARN")
    log.setLevel("OFF")
    log.error("hidden when OFF")
    log.setLevel("WARN")
    err = capfd.readouterr().err
    assert "W: shown at WARN" in err and "hidden" not in err
    with pytest.raises(ValueError, match="unknown level"):
        log.setLevel("LOUD")


def test_popart_enums_programs_use() -> None:
    opts = popxl.Ir()._pb_ir.getSessionOptions()
    opts.virtualGraphMode = popart.VirtualGraphMode.Manual
    assert opts.virtualGraphMode == popart.VirtualGraphMode.Manual
    assert {m.name for m in popart.VirtualGraphMode} == {"Off", "Manual", "Auto",
                                                         "ExecutionPhases"}
    assert popart.DataType.FLOAT8_143 != popart.DataType.FLOAT8_152
    assert popart.DataType["FLOAT16"] is popart.DataType.FLOAT16


def test_replication_factor_follows_session_options() -> None:
    ir = popxl.Ir()
    opts = ir._pb_ir.getSessionOptions()
    opts.enableDistributedReplicatedGraphs = True
    opts.globalReplicationFactor = 8
    assert ir.replication_factor == 8
    with ir.main_graph:
        buffer = popxl.replica_sharded_buffer((16,), popxl.float32, shard_over=8)
    assert buffer.tensor_shape == (2,)
    plain = popxl.Ir()
    plain._pb_ir.getSessionOptions().replicatedGraphCount = 4
    assert plain.replication_factor == 4 and plain.replica_grouping().group_size == 4


def test_accumulate_takes_an_int_into_a_float_variable() -> None:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        v = popxl.variable(np.full(3, 0.5, np.float32), name="v")
        ops.var_updates.accumulate_(v, popxl.constant(2))
        ops.var_updates.accumulate_(v, popxl.constant(np.array([1, 2, 3], np.int32)), 0.5)
    with popxl.Session(ir, "ipu_model") as session:
        session.run()
        got = session.get_tensor_data(v)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, [3.0, 3.5, 4.0])


@pytest.mark.parametrize("replicas", [1, 2])
def test_rank_0_remote_buffers(replicas) -> None:
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        buffer = popxl.remote_buffer((), popxl.int32, 1)
        v = popxl.remote_variable(np.int32(5), buffer, 0, name="count")
        x = ops.remote_load(buffer, 0)
        ops.remote_store(buffer, 0, x + 1)
        s = popxl.d2h_stream(x.shape, x.dtype, "x")
        ops.host_store(s, x)
    assert x.shape == () and v.shape == ()
    with popxl.Session(ir, "ipu_model") as session:
        np.testing.assert_array_equal(session.run()[s], np.full(replicas, 5).squeeze())
        assert session.get_tensor_data(v) == 6
        session.run()
        assert session.get_tensor_data(v) == 7


def test_cache_dir_in_the_environment_turns_engine_caching_on(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("POPXL_CACHE_DIR", str(tmp_path / "cache"))
    ir = popxl.Ir()
    opts = ir._pb_ir.getSessionOptions()
    assert opts.enableEngineCaching is True and opts.cachePath == str(tmp_path / "cache")
    with ir.main_graph:
        v = popxl.variable(np.ones(2, np.float32), name="v")
        ops.var_updates.accumulate_(v, popxl.constant(np.ones(2, np.float32)))
    with popxl.Session(ir, "ipu_model") as session:  # runs as ever
        session.run()
        np.testing.assert_array_equal(session.get_tensor_data(v), [2.0, 2.0])
    monkeypatch.delenv("POPXL_CACHE_DIR")
    assert popxl.Ir()._pb_ir.getSessionOptions().enableEngineCaching is False
