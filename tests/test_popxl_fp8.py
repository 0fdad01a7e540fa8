"""fp8: the formats, host conversions, the pow2-scaled ops, fp8 variables and streams."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import errors, ops
from xlgraph.fp8_utils import fp8_max, host_pow2scale_cast_from_fp8, host_pow2scale_cast_to_fp8
from xlgraph.ops.fp8 import _from_fp8_ref, _nearest_fp8_ref
from xlgraph.testing import run_once

ml_dtypes = pytest.importorskip("ml_dtypes")
F143, F152 = popxl.float8_143, popxl.float8_152


def bits(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).view(np.uint8)


def test_formats_are_graphcores() -> None:
    """1.4.3 has bias 8 (largest 240, smallest normal 2**-7), 1.5.2 bias 16 (57344, 2**-15);
    one NaN code 0x80, no infinities, no negative zero."""
    assert fp8_max(F143) == 240 and fp8_max(F152) == 57344
    for dt, tiny in ((F143, 2.0 ** -7), (F152, 2.0 ** -15)):
        info = ml_dtypes.finfo(dt.as_numpy())
        assert float(info.smallest_normal) == tiny
        values = np.arange(256, dtype=np.uint8).view(dt.as_numpy()).astype(np.float64)
        assert np.flatnonzero(np.isnan(values)).tolist() == [0x80]
        assert not np.isinf(values).any()
        assert bits(np.array([-0.0]).astype(dt.as_numpy())).tolist() == [0]


@pytest.mark.parametrize("dt", [F143, F152])
@pytest.mark.parametrize("nan_on_overflow", [True, False])
def test_host_cast_rounds_to_nearest_even_and_handles_overflow(dt, nan_on_overflow) -> None:
    rng = np.random.default_rng(0)
    top = fp8_max(dt)
    x = np.concatenate([rng.normal(size=200) * top / 8, [top * 1.02, -top * 1.5, np.nan, 0.0,
                                                         top * 0.999]]).astype(np.float32)
    for scale in (-3, 0, 2):
        got = host_pow2scale_cast_to_fp8(x, dt, scale, nan_on_overflow)
        want = _nearest_fp8_ref(x, np.array(scale), dt, nan_on_overflow)
        np.testing.assert_array_equal(bits(got), bits(want))
    over = host_pow2scale_cast_to_fp8(np.array([1e9, -1e9], np.float32), dt, 0, nan_on_overflow)
    expected = [np.nan, np.nan] if nan_on_overflow else [top, -top]
    np.testing.assert_array_equal(over.astype(np.float32), expected)


def test_host_round_trip_undoes_the_scale() -> None:
    x = np.array([0.5, -3.0, 12.0, 0.0625], np.float32)  # exactly representable after scaling
    for scale in (-4, 0, 3):
        f8 = host_pow2scale_cast_to_fp8(x, F143, scale)
        np.testing.assert_array_equal(f8.astype(np.float32), x * 2.0 ** scale)
        back = host_pow2scale_cast_from_fp8(bits(f8), F143, -scale)  # PopXL's uint8 form too
        assert back.dtype == np.float32
        np.testing.assert_array_equal(back, x)
    with pytest.raises(TypeError, match="fp8 data or uint8"):
        host_pow2scale_cast_from_fp8(x, F143)
    with pytest.raises(TypeError, match="float8_143 or float8_152"):
        host_pow2scale_cast_to_fp8(x, popxl.float16)


def test_from_fp8_decodes_every_code_like_ml_dtypes() -> None:
    every = np.arange(256, dtype=np.uint8)
    for dt in (F143, F152):
        codes = every.view(dt.as_numpy())
        ref = _from_fp8_ref(codes, np.array(0), popxl.float32)
        np.testing.assert_array_equal(ref, codes.astype(np.float32))


def _fp8_program(dt, scale: int, nan_on_overflow: bool):
    ir = popxl.Ir()
    with ir.main_graph:
        x_s = popxl.h2d_stream((6,), popxl.float32, "x")
        f8_s = popxl.d2h_stream((6,), dt, "f8")
        back_s = popxl.d2h_stream((6,), popxl.float32, "back")
        log2 = popxl.variable(np.int32(scale), name="log2_scale")
        f8 = ops.pow2scale_cast_to_fp8(ops.host_load(x_s), log2, dt,
                                       nan_on_overflow=nan_on_overflow)
        ops.host_store(f8_s, f8)
        ops.host_store(back_s, ops.pow2scale_cast_from_fp8(f8, -log2, popxl.float32))
    return ir, x_s, f8_s, back_s


@pytest.mark.parametrize("nan_on_overflow", [True, False])
def test_cast_ops_match_the_host_casts(nan_on_overflow: bool) -> None:
    x = np.array([1.0, -2.5, 300.0, 1e-4, np.nan, 0.3], np.float32)
    ir, x_s, f8_s, back_s = _fp8_program(F143, 1, nan_on_overflow)
    out = run_once(ir, {x_s: x})
    want = host_pow2scale_cast_to_fp8(x, F143, 1, nan_on_overflow)
    assert out[f8_s].dtype == F143.as_numpy()
    np.testing.assert_array_equal(bits(out[f8_s]), bits(want))
    np.testing.assert_array_equal(out[back_s], host_pow2scale_cast_from_fp8(want, F143, -1))
    assert np.isnan(out[back_s][2]) == nan_on_overflow


def test_log2_scale_out_of_range_fails_the_run_unless_the_option_is_off() -> None:
    """PopART's throwIfLog2ScaleTensorNotInRange (default True, read as a Session is built):
    a scale outside [-32, 32) fails the run (popart.poplar_application_runtime_error); with
    the option off the run succeeds, the scale taken as the nearest end of the range."""
    from xlgraph import popart_compat as popart

    ir, x_s, to_s, back_s = _fp8_program(F152, 40, True)
    with popxl.Session(ir) as session:
        with pytest.raises(popart.poplar_application_runtime_error, match=r"\[-32, 32\)"):
            session.run({x_s: np.ones(6, np.float32)})
    ir._pb_ir.getSessionOptions().throwIfLog2ScaleTensorNotInRange = False
    data = np.full(6, 2.0 ** -40, np.float32)
    with popxl.Session(ir) as session:
        out = session.run({x_s: data})
    np.testing.assert_array_equal(out[to_s], host_pow2scale_cast_to_fp8(data, F152, 31))
    np.testing.assert_array_equal(out[back_s], host_pow2scale_cast_from_fp8(out[to_s], F152,
                                                                            -32))


def test_matmul_and_conv_pow2scaled_match_float32_references() -> None:
    rng = np.random.default_rng(3)
    a = host_pow2scale_cast_to_fp8(rng.normal(size=(4, 16)), F143, 3)
    b = host_pow2scale_cast_to_fp8(rng.normal(size=(16, 5)), F152, 2)
    x = host_pow2scale_cast_to_fp8(rng.normal(size=(2, 3, 6, 6)), F143, 2)
    w = host_pow2scale_cast_to_fp8(rng.normal(size=(4, 3, 3, 3)), F143, 2)
    ir = popxl.Ir()
    with ir.main_graph:
        ta, tb, tx, tw = (popxl.variable(v) for v in (a, b, x, w))
        assert ta.dtype is F143 and tb.dtype is F152
        mm = ops.matmul_pow2scaled(ta, tb, popxl.constant(np.int32(-5)))
        cv = ops.conv_pow2scaled(tx, tw, -4, padding=(1, 1, 1, 1), stride=(2, 2),
                                 available_memory_proportions=[0.4])
        assert mm.dtype is popxl.float16 and cv.shape == (2, 4, 3, 3)
        assert cv.producer.hints == {"available_memory_proportion": [0.4]}
        outs = {t: popxl.d2h_stream(t.shape, t.dtype, n) for t, n in ((mm, "mm"), (cv, "cv"))}
        for t, s in outs.items():
            ops.host_store(s, t)
        with pytest.raises(errors.DTypeError, match="float8"):
            ops.matmul_pow2scaled(popxl.variable(np.ones((2, 2), np.float16)), tb, 0)
    got = run_once(ir)
    f32 = [v.astype(np.float32) for v in (a, b, x, w)]
    np.testing.assert_allclose(got[outs[mm]], (f32[0] @ f32[1]) / 32, rtol=1e-3)
    with popxl.Ir().main_graph as g:
        ref = ops.conv(popxl.variable(f32[2]), popxl.variable(f32[3]), padding=(1, 1, 1, 1),
                       stride=(2, 2))
        s = popxl.d2h_stream(ref.shape, popxl.float32, "ref")
        ops.host_store(s, ref)
    conv_ref = run_once(g.ir)[s] / 16
    np.testing.assert_allclose(got[outs[cv]].astype(np.float32), conv_ref, rtol=2e-3, atol=1e-3)


def test_fp8_variables_scale_and_saturate_and_accept_bits() -> None:
    data = np.array([1.0, 96.0, -0.5], np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        default = popxl.variable(data, F143, "default", log2_scale=2)
        saturated = popxl.variable(data, F143, "saturated", log2_scale=2, nan_on_overflow=False)
        raw = popxl.variable(bits(host_pow2scale_cast_to_fp8(data, F152)), F152, "raw")
        typed = popxl.variable(host_pow2scale_cast_to_fp8(data, F143), name="typed")
    assert typed.dtype is F143 and raw.dtype is F152
    session = popxl.Session(ir)
    got = {v.name: session.get_tensor_data(v).astype(np.float32)
           for v in (default, saturated, raw, typed)}
    np.testing.assert_array_equal(got["default"], [4.0, np.nan, -2.0])  # 384: NaN by default
    np.testing.assert_array_equal(got["saturated"], [4.0, 240.0, -2.0])
    np.testing.assert_array_equal(got["raw"], data)
    np.testing.assert_array_equal(got["typed"], data)


def test_fp8_streams_take_uint8_bits_or_fp8_arrays() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        in_s = popxl.h2d_stream((3,), F152, "in")
        out_s = popxl.d2h_stream((3,), popxl.float16, "out")
        ops.host_store(out_s, ops.pow2scale_cast_from_fp8(ops.host_load(in_s)))
    f8 = host_pow2scale_cast_to_fp8(np.array([2.0, -8.0, 0.25]), F152)
    with popxl.Session(ir) as session:
        for data in (f8, bits(f8)):
            np.testing.assert_array_equal(session.run({in_s: data})[out_s], [2.0, -8.0, 0.25])
        with pytest.raises(errors.StreamInputError, match="float8_152"):
            session.run({in_s: np.ones(3, np.float32)})


def test_conv_transpose_pow2scaled_matches_the_float32_kernel() -> None:
    from xlgraph.op import REGISTRY

    rng = np.random.default_rng(8)
    x = host_pow2scale_cast_to_fp8(rng.normal(size=(1, 4, 3, 3)), F143, 1)
    w = host_pow2scale_cast_to_fp8(rng.normal(size=(4, 2, 3, 3)), F152, 1)
    ir = popxl.Ir()
    with ir.main_graph:
        y = ops.conv_transpose_pow2scaled(popxl.variable(x), popxl.variable(w), -2,
                                          stride=(2, 2), output_padding=(1, 1))
        s = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(s, y)
    attrs = y.producer.attrs
    want = REGISTRY["conv_transpose"].kernel(x.astype(np.float32), w.astype(np.float32),
                                             **attrs) / 4
    assert y.shape == want.shape == (1, 2, 8, 8) and y.dtype is popxl.float16
    np.testing.assert_allclose(run_once(ir)[s].astype(np.float32), want, rtol=2e-3, atol=2e-3)


def test_remote_and_sharded_fp8_variables_round_trip() -> None:
    rng = np.random.default_rng(3)
    data = rng.normal(size=8).astype(np.float32)
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        buffer = popxl.remote_buffer((8,), F143, 1)
        remote = popxl.remote_variable(data, buffer, 0, F143, "remote", log2_scale=3)
        sharded, shard = popxl.replica_sharded_variable(data, F152, "sharded", log2_scale=-1)
        loaded = ops.remote_load(buffer, 0)
        doubled = ops.pow2scale_cast_to_fp8(
            ops.pow2scale_cast_from_fp8(loaded, -3, popxl.float32) * 2.0, 3, F143)
        ops.remote_store(buffer, 0, doubled)
        halves = ops.pow2scale_cast_from_fp8(shard, 1, popxl.float32)  # undo the -1 scale
        out = popxl.d2h_stream(halves.shape, popxl.float32, "shard")
        ops.host_store(out, halves)
    session = popxl.Session(ir)
    start = session.get_tensors_data([remote, sharded])
    assert start[remote].dtype == F143.as_numpy() and start[sharded].dtype == F152.as_numpy()
    np.testing.assert_array_equal(bits(start[remote]),
                                  bits((data * 8).astype(ml_dtypes.float8_e4m3fnuz)))
    with session:
        shards = session.run()[out]
    want_sharded = host_pow2scale_cast_from_fp8(host_pow2scale_cast_to_fp8(data, F152, -1),
                                                F152, 1)
    np.testing.assert_array_equal(shards.reshape(-1), want_sharded)  # replica 0's half, then 1's
    twice = host_pow2scale_cast_to_fp8(
        host_pow2scale_cast_from_fp8(host_pow2scale_cast_to_fp8(data, F143, 3), F143, -3) * 2,
        F143, 3)
    np.testing.assert_array_equal(bits(session.get_tensor_data(remote)), bits(twice))


def test_mse_scale_search_beats_every_other_scale() -> None:
    from xlgraph.fp8_utils import find_exponential_range, host_fp8_mse_scale, log_histogram

    assert find_exponential_range(F143) == (-10, 7)  # 2**-10 smallest subnormal, 240 < 2**8
    assert find_exponential_range(F152) == (-17, 15)
    x = np.random.default_rng(0).normal(size=2000).astype(np.float32) * 1e-3
    counts, (low, high) = log_histogram(x, popxl.float32)
    assert counts.sum() == np.count_nonzero(x) and (low, high) == (-149, 127)
    np.testing.assert_array_equal(np.flatnonzero(counts) + low,
                                  np.unique(np.floor(np.log2(np.abs(x)))))
    for fmt in (F143, F152):
        best = host_fp8_mse_scale(x, fmt)

        def err(s: int, fmt=fmt) -> float:
            f8 = host_pow2scale_cast_to_fp8(x, fmt, s, nan_on_overflow=False)
            return float(np.mean((host_pow2scale_cast_from_fp8(f8, fmt, -s) - x) ** 2))

        assert all(err(best) <= err(s) for s in range(best - 6, best + 7))


@pytest.mark.parametrize("to", [popxl.float16, popxl.float32, popxl.float64, None])
def test_host_cast_from_fp8_takes_the_float_dtype_popxl_passes(to) -> None:
    """PopXL's ``host_pow2scale_cast_from_fp8(src, dtype, log2_scale)`` takes the float dtype
    to cast to (None: float32); an fp8 array carries its own format."""
    rng = np.random.default_rng(5)
    for fmt in (F143, F152):
        f8 = rng.normal(size=20).astype(fmt.as_numpy())
        got = host_pow2scale_cast_from_fp8(f8, to, -3)
        want_dtype = np.float32 if to is None else to.as_numpy()
        assert got.dtype == want_dtype
        np.testing.assert_array_equal(got, (f8.astype(np.float64) / 8).astype(want_dtype))
    with pytest.raises(TypeError, match="float dtype"):
        host_pow2scale_cast_from_fp8(f8, popxl.int32)


def _conv_ref(x: np.ndarray, w: np.ndarray, stride: int, pad: int, groups: int) -> np.ndarray:
    """float64 convolution by sliding windows (independent of xlgraph's conv kernels)."""
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    k = w.shape[2]
    win = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))[:, :, ::stride,
                                                                           ::stride]
    cin, cout = w.shape[1], w.shape[0] // groups
    return np.concatenate([np.einsum("bchwij,ocij->bohw", win[:, g * cin:(g + 1) * cin],
                                     w[g * cout:(g + 1) * cout]) for g in range(groups)], 1)


@pytest.mark.parametrize("fx, fw", [(F143, F143), (F152, F143), (F152, F152)])
@pytest.mark.parametrize("scale", [-2, 0, 3])
def test_pow2scaled_conv_and_matmul_match_ml_dtypes_references(fx, fw, scale) -> None:
    """PopXL's ``conv_pow2scaled`` / ``matmul_pow2scaled``: ``op(t, w) * 2**log2_scale`` in
    float16, from fp8 operands decoded as ml_dtypes decodes them; never NaN for finite data."""
    rng = np.random.default_rng(scale + 10)
    x = rng.normal(size=(2, 4, 7, 7)).astype(fx.as_numpy())
    w = rng.normal(size=(6, 2, 3, 3)).astype(fw.as_numpy())
    a = rng.normal(size=(5, 12)).astype(fx.as_numpy())
    b = rng.normal(size=(12, 3)).astype(fw.as_numpy())
    ir = popxl.Ir()
    with ir.main_graph:
        log2 = popxl.variable(np.int32(scale), name="log2_scale")
        cv = ops.conv_pow2scaled(popxl.variable(x), popxl.variable(w), log2, stride=(2, 2),
                                 padding=(1, 1, 1, 1), groups=2)
        mm = ops.matmul_pow2scaled(popxl.variable(a), popxl.variable(b), log2)
        outs = {t: popxl.d2h_stream(t.shape, t.dtype, n) for t, n in ((cv, "cv"), (mm, "mm"))}
        for t, s in outs.items():
            ops.host_store(s, t)
    got = run_once(ir)
    x64, w64, a64, b64 = (v.astype(np.float64) for v in (x, w, a, b))
    conv_want = (_conv_ref(x64, w64, 2, 1, 2) * 2.0 ** scale).astype(np.float16)
    mm_want = (a64 @ b64 * 2.0 ** scale).astype(np.float16)
    for t, want in ((cv, conv_want), (mm, mm_want)):
        out = got[outs[t]]
        assert out.dtype == np.float16 and not np.isnan(out).any()
        np.testing.assert_allclose(out.astype(np.float64), want.astype(np.float64),
                                   rtol=2e-3, atol=2e-3 * 2.0 ** scale)
