"""float16 ops computed in float32 registers and rounded on store (``xlgraph.ops.half``).

Every op that sets ``OpDef.widen_half`` gives, on float16 inputs, its float32 kernel's result
on the same (float16-exact) values rounded to float16: bit for bit on the numpy backend and in
the reference interpreter, within one float16 step on the numba backend (whose float32 loops
match numpy's to ``TOLERANCE``). The compiled conversions are ``astype``'s bits.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from op_harness import build_op, run_forward, sample_arrays

import xlgraph
from xlgraph import ops
from xlgraph.op import BUILDERS, REGISTRY
from xlgraph.ops import half
from xlgraph.ops.half_round import ROUND_HALF

HAS_NUMBA = importlib.util.find_spec("numba") is not None
WIDE = sorted(n for n, d in REGISTRY.items() if d.widen_half and d.samples is not None)
# The ops of float16 training steps (a transformer's, a CNN's, float16 optimiser state), also
# run on the numba backend.
STEP_OPS = ("add", "mul", "sum", "gelu", "gelu_grad", "softmax", "softmax_grad", "layer_norm",
            "layer_norm_grad", "scaled_add_", "conv", "conv_transpose", "conv_grad_weight",
            "max_pool", "max_pool_grad", "relu", "relu_grad", "log_softmax", "log_softmax_grad",
            "nll_loss", "nll_loss_grad", "accumulate_moving_average_",
            "accumulate_moving_average_square_", "adam_updater", "sgd_momentum_", "sgd_update_")


def _reference(name: str, index: int) -> tuple[list[np.ndarray], list[np.ndarray], object]:
    """The float16 inputs of sample ``index`` of op ``name``, and its float32 kernel's outputs
    on those values rounded to float16 where the op's output is float16."""
    defn = REGISTRY[name]
    sample = defn.samples(np.random.default_rng(7))[index]
    arrays = sample_arrays(sample, np.float16)
    ir, _, d2h, op = build_op(defn, sample, arrays)
    wide = [a.astype(np.float32) if a.dtype == np.float16 else a for a in arrays]
    args, it = [], iter(wide)
    for t in op.inputs:  # the op's inputs: the loaded arrays in order, or constants it made
        args.append(next(it) if _loaded(t) else _wide(t.data))
    result = defn.kernel(*[a.copy() for a in args], **op.attrs)
    results = list(result) if isinstance(result, tuple) else [result]
    expect = [np.asarray(r).astype(s.dtype.as_numpy()) for r, s in zip(results, d2h)]
    return arrays, expect, sample


def _loaded(t: xlgraph.Tensor) -> bool:
    return t.producer is not None and t.producer.defn.kind == "host_load"


def _wide(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float32) if a.dtype == np.float16 else a


def _cases(names: tuple[str, ...] | list[str]) -> list[tuple[str, int]]:
    """The samples whose op takes a float16 input, each input loaded or a constant (not made
    by other ops inside the builder)."""
    found = []
    for name in names:
        defn = REGISTRY[name]
        for i, sample in enumerate(defn.samples(np.random.default_rng(7))):
            _, _, _, op = build_op(defn, sample, sample_arrays(sample, np.float16))
            if (any(t.dtype == xlgraph.float16 for t in op.inputs)
                    and all(_loaded(t) or t.producer is None for t in op.inputs)):
                found.append((name, i))
    return found


@pytest.mark.parametrize("name,index", _cases(WIDE))
def test_numpy_backend_rounds_the_float32_result(name: str, index: int) -> None:
    arrays, expect, sample = _reference(name, index)
    got, op = run_forward(REGISTRY[name], sample, arrays, optimize=False, backend="numpy")
    assert any(t.dtype == xlgraph.float16 for t in op.inputs)
    for g, e in zip(got, expect):
        np.testing.assert_array_equal(g, e, err_msg=name)


@pytest.mark.skipif(not HAS_NUMBA, reason="the numba backend needs numba (xlgraph[fast])")
@pytest.mark.parametrize("name,index", _cases(STEP_OPS))
def test_numba_backend_within_one_float16_step(name: str, index: int) -> None:
    arrays, expect, sample = _reference(name, index)
    got, _ = run_forward(REGISTRY[name], sample, arrays, optimize=True, backend="numba")
    for g, e in zip(got, expect):
        assert g.dtype == e.dtype
        np.testing.assert_allclose(g.astype(np.float32), e.astype(np.float32), rtol=2.0 ** -10,
                                   atol=2.0 ** -14, err_msg=name)


def test_interpreter_rounds_the_float32_result() -> None:
    """``check_numerics`` runs the reference interpreter: the same float16 form."""
    x = np.random.default_rng(0).uniform(-3, 3, (4, 37)).astype(np.float16)
    ir = xlgraph.Ir()
    with ir.main_graph:
        s = xlgraph.h2d_stream(x.shape, xlgraph.float16, "x")
        out = xlgraph.d2h_stream(x.shape, xlgraph.float16, "y")
        ops.host_store(out, ops.gelu(ops.host_load(s)))
    with xlgraph.Session(ir, check_numerics=True) as session:
        got = session.run({s: x})[out]
    expect = REGISTRY["gelu"].kernel(x.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(got, expect)


@pytest.mark.parametrize("backend", ["numpy"] + (["numba"] if HAS_NUMBA else []))
def test_float16_gelu_grad_and_layer_norm_at_least_as_accurate(backend: str) -> None:
    """Against float64 truth, the float16 ops now err no more than numpy's float16 loops did
    (every intermediate rounded to float16) and stay within a float16 step or two."""
    rng = np.random.default_rng(3)
    x = rng.uniform(-4, 4, (64, 256)).astype(np.float16)
    dy = rng.normal(size=(64, 256)).astype(np.float16)
    w = (1 + 0.1 * rng.normal(size=256)).astype(np.float16)
    b = (0.1 * rng.normal(size=256)).astype(np.float16)
    ir = xlgraph.Ir()
    with ir.main_graph:
        streams = [xlgraph.h2d_stream(a.shape, xlgraph.float16, f"in{i}")
                   for i, a in enumerate((x, dy, w, b))]
        tx, tdy, tw, tb = (ops.host_load(s) for s in streams)
        outs = [BUILDERS["gelu_grad"](tdy, tx), ops.layer_norm(tx, tw, tb)]
        d2h = [xlgraph.d2h_stream(t.shape, t.dtype, f"out{i}") for i, t in enumerate(outs)]
        for s, t in zip(d2h, outs):
            ops.host_store(s, t)
    with xlgraph.Session(ir, backend=backend, compile_in_background=False) as session:
        got = session.run(dict(zip(streams, (x, dy, w, b))))
    kernels = [(REGISTRY["gelu_grad"].kernel, (dy, x), {}),
               (REGISTRY["layer_norm"].kernel, (x, w, b), {"eps": 1e-5})]
    for stream, (kernel, args, attrs) in zip(d2h, kernels):
        truth = kernel(*(a.astype(np.float64) for a in args), **attrs)
        old = kernel(*args, **attrs).astype(np.float64)  # numpy's float16 loops
        new = got[stream].astype(np.float64)
        scale = np.abs(truth).max()
        assert np.abs(new - truth).max() <= np.abs(old - truth).max()
        assert np.abs(new - truth).max() <= 2 * 2.0 ** -11 * scale


@pytest.mark.skipif(not HAS_NUMBA, reason="the compiled conversions need numba")
def test_compiled_conversions_are_astypes_bits() -> None:
    from xlgraph.lower.backends import numba_half
    from xlgraph.lower.backends.numba_backend import NumbaBackend

    assert numba_half.install()
    every_half = np.arange(2 ** 16, dtype=np.uint16)
    wide = np.empty(every_half.size, np.float32)
    numba_half.widen(every_half, wide)
    with np.errstate(invalid="ignore"):  # NaN payloads too: a signalling NaN stays signalling
        np.testing.assert_array_equal(
            wide.view(np.uint32), every_half.view(np.float16).astype(np.float32).view(np.uint32))
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2 ** 32, 200_000, dtype=np.uint64).astype(np.uint32)
    edges = (every_half.view(np.float16).astype(np.float32).view(np.uint32).astype(np.int64)
             + np.array([[-1], [0], [1], [1 << 12], [(1 << 12) - 1], [(1 << 12) + 1]]))
    bits = np.concatenate([bits, (edges.reshape(-1) % 2 ** 32).astype(np.uint32)])
    values = bits.view(np.float32)
    narrow = np.empty(values.size, np.uint16)
    numba_half.narrow(values, narrow)
    with np.errstate(over="ignore", invalid="ignore"):
        expect = values.astype(np.float16)
    assert np.isnan(values).sum() > 500  # random bit patterns: NaNs of every payload
    np.testing.assert_array_equal(narrow, expect.view(np.uint16))
    rounded = np.empty(values.size, np.float32)
    numba_half.round_half(values, rounded)
    np.testing.assert_array_equal(rounded.view(np.uint32),
                                  expect.astype(np.float32).view(np.uint32))
    spec = xlgraph.TensorSpec(values.shape, xlgraph.float32)  # wide storage's rounding step
    loop, _ = NumbaBackend().kernel(ROUND_HALF.loop, [spec], [spec], {})
    loop(values, rounded)
    same = values.copy()
    loop(same, same)
    for got in (rounded, same):
        np.testing.assert_array_equal(got.view(np.uint32),
                                      expect.astype(np.float32).view(np.uint32))
    # and through the module's helpers, strided and contiguous
    x = rng.normal(size=(40, 30)).astype(np.float16)
    np.testing.assert_array_equal(half.widen(x.T), x.T.astype(np.float32))
    out = np.empty((30, 40), np.float16)
    half.narrow_into(out, x.T.astype(np.float32) * 3)
    np.testing.assert_array_equal(out, (x.T.astype(np.float32) * 3).astype(np.float16))


@pytest.mark.skipif(not HAS_NUMBA, reason="the compiled conversions need numba")
def test_nan_payloads_are_the_same_on_the_numba_backend() -> None:
    """Signalling and quiet NaNs of float16 inputs come out of a cast, relu and max with the
    bits of the numpy backend (LLVM's conversions used to set the quiet bit)."""
    x = np.random.default_rng(0).normal(size=(16, 16)).astype(np.float16)
    bits = x.view(np.uint16)
    bits[::3, 1] = 0x7C01 + np.arange(6) * 0x41  # signalling
    bits[1::3, 2] = [0xFE0A, 0x7E01, 0xFD00, 0x7D55, 0xFC11]  # quiet, and signalling
    results = []
    for backend in ("numpy", "numba"):
        ir = xlgraph.Ir()
        with ir.main_graph:
            s = xlgraph.h2d_stream(x.shape, xlgraph.float16, "x")
            t = ops.host_load(s)
            outs = [ops.cast(t, xlgraph.float32), ops.relu(t), ops.max(t, 1)]
            streams = [xlgraph.d2h_stream(o.shape, o.dtype, f"y{i}") for i, o in enumerate(outs)]
            for d, o in zip(streams, outs):
                ops.host_store(d, o)
        with xlgraph.Session(ir, backend=backend) as session, np.errstate(invalid="ignore"):
            got = session.run({s: x})
        results.append([got[d].view(f"u{got[d].itemsize}") for d in streams])
    with np.errstate(invalid="ignore"):
        assert results[0][0].tolist() == x.astype(np.float32).view(np.uint32).tolist()
    for numpy_bits, numba_bits in zip(*results):
        np.testing.assert_array_equal(numba_bits, numpy_bits)


def test_large_temporaries_are_reused_without_aliasing_results() -> None:
    """Widened operands and products go into reused buffers (``half.temp``): consecutive
    calls of different shapes give ``astype``-rounded float32 products and leave earlier
    results alone."""
    from xlgraph.ops.matmul_kernel import matmul_out

    rng = np.random.default_rng(1)
    a = rng.normal(size=(2048, 64)).astype(np.float16)
    b = rng.normal(size=(64, 1100)).astype(np.float16)
    first = matmul_out(a, b)
    second = matmul_out(b.T.copy(), a.T)  # another shape through the same slots
    expect = np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(first, expect)
    np.testing.assert_array_equal(
        second, np.matmul(b.T.astype(np.float32), a.T.astype(np.float32)).astype(np.float16))
    t = half.temp((2048, 1100), 5)
    assert t.nbytes >= 8 << 20 and half.temp((1100, 2048), 5).base is t.base


@pytest.mark.parametrize("backend", ["numpy"] + (["numba"] if HAS_NUMBA else []))
def test_cast_between_float16_and_float32_is_astype(backend: str) -> None:
    """``cast`` into pool buffers and as fresh arrays, both directions, gives ``astype``'s
    bits (rounding to nearest even, overflow to infinity, NaN kept)."""
    rng = np.random.default_rng(2)
    x = (rng.normal(size=(64, 130)) * 3e4).astype(np.float32)
    x[0, :4] = [np.nan, np.inf, 65520.0, 1e-8]
    ir = xlgraph.Ir()
    with ir.main_graph:
        s = xlgraph.h2d_stream(x.shape, xlgraph.float32, "x")
        h = ops.cast(ops.host_load(s), xlgraph.float16)
        back = ops.cast(h * 1.0, xlgraph.float32)
        outs = [xlgraph.d2h_stream(x.shape, t.dtype, n) for t, n in ((h, "h"), (back, "b"))]
        ops.host_store(outs[0], h)
        ops.host_store(outs[1], back)
    with (xlgraph.Session(ir, backend=backend, compile_in_background=False) as session,
          np.errstate(over="ignore")):  # numpy's cast warns of the overflow to infinity
        got = session.run({s: x})
        expect = x.astype(np.float16)
    np.testing.assert_array_equal(got[outs[0]], expect)
    np.testing.assert_array_equal(got[outs[1]], expect.astype(np.float32))


@pytest.mark.skipif(not HAS_NUMBA, reason="the compiled conversions need numba")
def test_float16_overflow_still_trips_floating_point_checks() -> None:
    """A float32 result past float16's range raises under the traps, with the compiled
    conversions installed, as numpy's float16 loops did."""
    from xlgraph.lower.backends import numba_half

    assert numba_half.install()
    x = np.full((16, 16), 300.0, np.float16)
    ir = xlgraph.Ir()
    ir.session_options.enableFloatingPointChecks = True
    with ir.main_graph:
        s = xlgraph.h2d_stream(x.shape, xlgraph.float16, "x")
        t = ops.host_load(s)
        out = xlgraph.d2h_stream(x.shape, xlgraph.float16, "y")
        ops.host_store(out, ops.mul(t, t))
    with xlgraph.Session(ir, backend="numpy") as session, pytest.raises(Exception,
                                                                         match="overflow"):
        session.run({s: x})


@pytest.mark.parametrize("backend", ["numpy"] + (["numba"] if HAS_NUMBA else []))
def test_embedding_gradient_accumulates_in_float32(backend: str) -> None:
    """``gather_grad`` (not a public op, so not in the sample cases above) on float16 rows:
    the float32 sums of the repeated indices, rounded once."""
    from xlgraph.core.op import apply1
    from xlgraph.ops.indexing import _GATHER_GRAD

    rng = np.random.default_rng(4)
    dy = rng.normal(size=(300, 64)).astype(np.float16)
    idx = rng.integers(-10, 10, 300).astype(np.int32)
    ir = xlgraph.Ir()
    with ir.main_graph:
        s_dy = xlgraph.h2d_stream(dy.shape, xlgraph.float16, "dy")
        s_idx = xlgraph.h2d_stream(idx.shape, xlgraph.int32, "idx")
        grad = apply1(_GATHER_GRAD, [ops.host_load(s_dy), ops.host_load(s_idx)],
                      {"shape": (10, 64), "axis": 0, "zero_OOR": False})
        out = xlgraph.d2h_stream(grad.shape, grad.dtype, "grad")
        ops.host_store(out, grad)
    with xlgraph.Session(ir, backend=backend, compile_in_background=False) as session:
        got = session.run({s_dy: dy, s_idx: idx})[out]
    expect = np.zeros((10, 64), np.float32)
    np.add.at(expect, idx, dy.astype(np.float32))
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, expect.astype(np.float16))
