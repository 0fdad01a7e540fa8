"""float16 values held in float32 between float32-register ops (``xlgraph.lower.wide_half``).

The compiled plan keeps them in float32, rounded to float16 precision on store; every result
must keep the bits of the per-op forms (``xlgraph.ops.half``), which the interpreter runs and
the compiled plan ran before (``executable.WIDE_HALF = False``): on the numpy and numba
backends, through calls, functions and loops, past float16's range, and for the ops that read
the float16 bits (a ``narrow_half`` copy).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops
from xlgraph.lower import executable
from xlgraph.lower.flatten import REPEATED_MIN_OPS
from xlgraph.ops import half
from xlgraph.ops.elementwise import relu_grad
from xlgraph.ops.half_round import ROUND_HALF, round_loop
from xlgraph.ops.pool import max_pool_grad

HAS_NUMBA = importlib.util.find_spec("numba") is not None
BACKENDS = ["numpy", pytest.param("numba", marks=pytest.mark.skipif(
    not HAS_NUMBA, reason="the numba backend needs numba (xlgraph[fast])"))]
F16 = popxl.float16

# Ties, the range's edge (65519 rounds down, 65520 up to infinity), subnormals, NaN, signs.
SPECIAL = np.array([0.0, -0.0, 1.0, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 1 + 2.0 ** -10 + 2.0 ** -11,
                    65504.0, 65519.0, 65520.0, 1e6, -1e6, np.inf, -np.inf, np.nan, 6e-8, 3e-8,
                    2.0 ** -25, 2.0 ** -24 * 1.5, 1e-10, -5.96e-8, 0.1, -3.14159], np.float32)


def _values(rng: np.random.Generator, n: int = 4096) -> np.ndarray:
    x = np.concatenate([SPECIAL, (rng.standard_normal(n) * 10.0 ** rng.integers(-9, 6, n))
                        .astype(np.float32)])
    return x


def _expected(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return x.astype(np.float16).astype(np.float32)


def test_round_half_is_astypes_bits_on_numpy() -> None:
    x = _values(np.random.default_rng(0))
    saved = dict(half._FAST)
    try:
        half._FAST.update(round=None, narrow=None, widen=None)  # numpy's casts
        with np.errstate(over="ignore"):
            got = ROUND_HALF.kernel(x)
            into = ROUND_HALF.kernel_out(x.copy(), out=np.empty_like(x))
            same = x.copy()
            ROUND_HALF.kernel_out(same, out=same)  # may write over its input
    finally:
        half._FAST.update(saved)
    for a in (got, into, same):
        assert a.dtype == np.float32
        np.testing.assert_array_equal(a.view(np.uint32), _expected(x).view(np.uint32))


@pytest.mark.skipif(not HAS_NUMBA, reason="the numba backend needs numba (xlgraph[fast])")
def test_round_half_is_astypes_bits_compiled() -> None:
    from xlgraph.lower.backends.numba_backend import NumbaBackend

    x = _values(np.random.default_rng(1)).reshape(2, -1)
    spec = popxl.TensorSpec(x.shape, popxl.float32)
    loop, extra = NumbaBackend().kernel(ROUND_HALF.loop, [spec], [spec], {})
    assert loop.py_func is round_loop and extra == ()
    out = np.empty_like(x)
    loop(x, out)
    np.testing.assert_array_equal(out.view(np.uint32), _expected(x).view(np.uint32))
    same = x.copy()
    loop(same, same)  # in place: the loop over the one array
    np.testing.assert_array_equal(same.view(np.uint32), _expected(x).view(np.uint32))
    fast = np.empty_like(x)
    ROUND_HALF.kernel_out(x, out=fast)  # the installed one-pass loop
    assert half._FAST["round"] is not None  # the numba backend installed its loop
    np.testing.assert_array_equal(fast.view(np.uint32), _expected(x).view(np.uint32))


def _store(t: popxl.Tensor, streams: list) -> None:
    s = popxl.d2h_stream(t.shape, t.dtype, f"out{len(streams)}")
    ops.host_store(s, t)
    streams.append(s)


def _stored(*tensors: popxl.Tensor) -> list:
    """Each of ``tensors`` stored to a host stream of its own; the streams."""
    streams: list = []
    for t in tensors:
        _store(t, streams)
    return streams


def _graph() -> tuple[popxl.Ir, popxl.HostToDeviceStream, list]:
    """float16 work through an inlined call, a function (a graph called from two sites), a
    loop, views, casts both ways, a value past float16's range, ops that read the float16 bits
    (``concat``, ``gather``) and an in-place update of a float16 variable."""
    rng = np.random.default_rng(3)
    ir = popxl.Ir()
    streams: list = []
    with ir.main_graph:
        x_s = popxl.h2d_stream((8, 16), F16, "x")
        x = ops.host_load(x_s)
        w = popxl.variable(rng.normal(size=(16, 16)).astype(np.float16), F16, "w")
        b = popxl.variable(rng.normal(size=(16,)).astype(np.float16), F16, "b")
        h = ops.gelu(x @ w + b)

        def block(t: popxl.Tensor) -> popxl.Tensor:
            for _ in range(REPEATED_MIN_OPS):
                t = ops.tanh(t) * 1.5 + 0.25
            return t

        g = ir.create_graph(block, h.spec)
        (y,) = ops.call(g, h)
        (y,) = ops.call(g, y * 2.0)  # a function: two sites, at least REPEATED_MIN_OPS ops
        small = ir.create_graph(lambda t: ops.softmax(t * 3.0, axis=-1), y.spec)
        (z,) = ops.call(small, y)  # inlined
        body = ir.create_graph(lambda t, p: ops.layer_norm(t, p, p) + t, z.spec, b.spec)
        (z,) = ops.repeat(body, 3, z, b)
        heads = ops.transpose(z.reshape((2, 4, 4, 4)), (0, 2, 1, 3))
        att = heads @ ops.transpose(heads, (0, 1, 3, 2))
        big = att * 30000.0 + 40000.0  # past float16's range: infinities, then NaN below
        nan = big - big
        wide32 = ops.cast(att, popxl.float32) * 0.5
        back = ops.cast(wide32 + 1e-3, F16) + 1.0  # float32 to float16, rounded once
        both = ops.concat([z, z * 0.5], axis=0)  # reads the float16 bits
        q = (z + 0.5) * 2.0
        rows = ops.gather(q, popxl.constant(np.array([1, 3], np.int32)))  # float16 bits
        more = ops.concat([q, q + 1.0], axis=1)  # the same value, as float16 and float32
        ops.scaled_add_(w, (h.T @ h) * 0.001, a=1.0, b=1.0)  # float16 variable, in place
        for t in (h, y, z, att, big, nan, wide32, back, both, rows, more,
                  ops.sum(att, axis=0)):
            _store(t, streams)
    return ir, x_s, streams


def _run(build, feeds, steps: int = 2, **kwargs) -> tuple[list[np.ndarray], str]:
    ir, x_s, streams = build()
    session = popxl.Session(ir, compile_in_background=False, **kwargs)
    got = []
    with session:
        for feed in feeds:
            out = session.run({x_s: feed})
            got.extend(np.array(out[s]) for s in streams)
        got.extend(np.array(a) for a in session.get_tensors_data(
            ir.main_graph.variables).values())
    return got, getattr(session.executable, "source", "")


def _same_bits(got: list[np.ndarray], expected: list[np.ndarray]) -> None:
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.dtype == e.dtype and g.shape == e.shape, i
        assert g.tobytes() == e.tobytes(), f"output {i} differs"


def _per_op(monkeypatch: pytest.MonkeyPatch, build, feeds, **kwargs) -> list[np.ndarray]:
    with monkeypatch.context() as m:
        m.setattr(executable, "WIDE_HALF", False)
        return _run(build, feeds, **kwargs)[0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_graph_keeps_the_per_op_bits(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    feeds = [rng.normal(size=(8, 16)).astype(np.float16) * 2 for _ in range(2)]
    with np.errstate(over="ignore", invalid="ignore"):
        got, source = _run(_graph, feeds, backend=backend)
        expected = _per_op(monkeypatch, _graph, feeds, backend=backend)
        interpreted = _run(_graph, feeds, optimize=False)[0]
    assert "round_half" in source and "narrow_half" in source  # the pass ran, both ways
    assert any(np.isinf(a).any() for a in got) and any(np.isnan(a).any() for a in got)
    _same_bits(got, expected)
    if backend == "numpy":  # the numba backend's float32 loops are within TOLERANCE of numpy's
        _same_bits(got, interpreted)


def test_floating_point_checks_keep_the_per_op_forms() -> None:
    ir, x_s, streams = _graph()
    ir.session_options.enableFloatingPointChecks = True
    session = popxl.Session(ir, compile_in_background=False, backend="numpy")
    source = session.executable.source
    assert "round_half" not in source and "narrow_half" not in source
    with session, pytest.raises(popxl.errors.ExecutionError, match="overflow"):
        session.run({x_s: np.ones((8, 16), np.float16)})  # 30000 * att overflows float16


@pytest.mark.parametrize("first_order", [popxl.float32, F16])
@pytest.mark.parametrize("backend", BACKENDS)
def test_transformer_training_keeps_the_per_op_bits(backend: str, first_order: popxl.dtype,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The benchmark's float16 decoder (tiny), two AdamW steps: loss and every weight. With
    a float16 first moment (``half.py``'s case) each weight's update is one Adam chain on the
    numba backend."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import gpt_model as gm

    cfg, batch = gm.TINY, 2
    data = gm.token_batches(cfg, batch)[:2]

    def run(wide: bool) -> tuple[list[np.ndarray], str]:
        with monkeypatch.context() as m:
            m.setattr(executable, "WIDE_HALF", wide)
            ir, tok_s, loss_s, named = gm.build_train(cfg, batch, half=True,
                                                      first_order=first_order)
            # numba compiles the segments of a step anew each time: the loops alone here
            session = popxl.Session(ir, backend=backend, compile_in_background=False,
                                    fuse_steps=False)
            gm.load(session, named, gm.initial_weights(cfg))
            with session:
                got = [np.array(session.run({tok_s: d})[loss_s]) for d in data]
                got.extend(np.array(a) for a in session.get_tensors_data(
                    ir.main_graph.variables).values())
            return got, session.executable.source

    got, source = run(True)
    expected, old = run(False)
    assert source.count("round_half") > 20 and "round_half" not in old
    if backend == "numba" and first_order is F16:
        assert source.count("j_adam_step") > 10 and "j_adam_step" not in old
    _same_bits(got, expected)


def _pooling_graph() -> tuple[popxl.Ir, popxl.HostToDeviceStream, list]:
    """The float16 CNN's exact ops (``relu``, ``max_pool`` and their gradients, the pooling
    windows apart and overlapping) between ops that keep their values wide, and a bias added
    to a value that dies there (in place)."""
    ir = popxl.Ir()
    with ir.main_graph:
        x_s = popxl.h2d_stream((2, 3, 6, 6), F16, "x")
        x = ops.host_load(x_s)
        bias = popxl.variable(np.array([0.5, -1.0, 2.0], np.float16).reshape(1, 3, 1, 1), F16,
                              "bias")
        h = x * 1.5 + bias  # past float16's range: infinities; NaN from the input
        r = ops.relu(h)
        apart = ops.max_pool(r, (2, 2), (2, 2))
        over = ops.max_pool(h, (3, 3), (1, 1))
        dy = relu_grad(apart * 0.75, apart)
        g_apart = max_pool_grad(dy, r, apart, kernel=(2, 2), stride=(2, 2), pads=(0, 0, 0, 0),
                                dilation=(1, 1), ceil_mode=False)
        g_over = max_pool_grad(over * 0.5, h, over, kernel=(3, 3), stride=(1, 1),
                               pads=(0, 0, 0, 0), dilation=(1, 1), ceil_mode=False)
        streams = _stored(r * 2.0, apart * 3.0, over - 1.0, dy * 0.25, g_apart + 1.0,
                          g_over * 3.0)
    return ir, x_s, streams


@pytest.mark.parametrize("backend", BACKENDS)
def test_exact_ops_skip_their_rounding_and_keep_the_bits(backend: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(11)
    feeds = []
    for _ in range(2):
        x = (rng.normal(size=(2, 3, 6, 6)) * 3).astype(np.float16)
        x.reshape(-1)[:6] = [np.nan, np.inf, -np.inf, 50000.0, -0.0, 6e-8]
        feeds.append(x)
    with np.errstate(over="ignore", invalid="ignore"):
        got, source = _checked(_pooling_graph, feeds, backend, monkeypatch)
    rounded = [line.split("  # ")[1] for line in source.splitlines()
               if "round_half" in line and "  # " in line]
    assert not any(f"= {name} " in c for c in rounded for name in ("relu", "max_pool"))
    assert not any("= relu_grad " in c for c in rounded)
    assert sum("= max_pool_grad " in c for c in rounded) == 1  # the overlapping windows add
    assert re.search(r"o_add\((b\d+), w0, out=\1\)", source)  # into the dying product's buffer
    assert any(np.isinf(a).any() for a in got) and any(np.isnan(a).any() for a in got)


def _checked(build, feeds, backend: str, monkeypatch: pytest.MonkeyPatch,
             ) -> tuple[list[np.ndarray], str]:
    """The compiled plan's results and source, checked bit for bit against the per-op forms
    and the interpreter."""
    got, source = _run(build, feeds, backend=backend)
    _same_bits(got, _per_op(monkeypatch, build, feeds, backend=backend))
    _same_bits(got, _run(build, feeds, optimize=False)[0])
    return got, source


def _shared_graph() -> tuple[popxl.Ir, popxl.HostToDeviceStream, list]:
    """A float16 variable read by two products (one through a transpose) before an in-place
    update and by a third after it; a float16 input read by three ops, a stored product by
    two."""
    rng = np.random.default_rng(4)
    ir = popxl.Ir()
    with ir.main_graph:
        x_s = popxl.h2d_stream((8, 16), F16, "x")
        x = ops.host_load(x_s)
        w = popxl.variable((rng.normal(size=(16, 16)) * 0.3).astype(np.float16), F16, "w")
        a = x @ w
        b = a @ ops.transpose(w, (1, 0))
        c = ops.gelu(x) * 2.0
        updated = ops.scaled_add_(w, (a.T @ b) * 0.01, a=1.0, b=1.0)
        streams = _stored(a, b, c, x @ updated)
    return ir, x_s, streams


@pytest.mark.parametrize("backend", BACKENDS)
def test_values_read_by_several_steps_are_widened_once(backend: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(6)
    feeds = [rng.normal(size=(8, 16)).astype(np.float16) for _ in range(2)]
    source = _checked(_shared_graph, feeds, backend, monkeypatch)[1]
    widened = [line.split("  # ")[0] for line in source.splitlines() if "widen_half(" in line]
    # x, w and a (float16 for its host transfer, read by two products), once each
    assert len(widened) == 3 and any("(w0," in line for line in widened)


def test_ops_declare_their_float16_storage_on_their_records() -> None:
    """``OpDef.half_view``, ``half_exact`` and ``half_registers`` are set where each op is
    defined: a half view is a plain view of one input, an exact op computes in float32
    registers, and an op that opts in through its own kernel is not also flagged."""
    from xlgraph.op import REGISTRY

    views = {n for n, d in REGISTRY.items() if d.half_view}
    assert {"reshape", "transpose", "slice", "identity", "detach", "expand"} <= views
    for name in views:
        d = REGISTRY[name]
        assert d.view and d.inplace_of is None and not d.side_effect, name
    exact = {n: d for n, d in REGISTRY.items() if d.half_exact is not None}
    assert {"relu", "relu_grad", "max_pool", "max_pool_grad"} <= set(exact)
    assert all(d.widen_half for d in exact.values())
    pool = {"kernel": (2, 2), "dilation": (1, 1)}
    assert exact["max_pool_grad"].half_exact({**pool, "stride": (2, 2)})
    assert not exact["max_pool_grad"].half_exact({**pool, "stride": (1, 1)})  # windows overlap
    assert REGISTRY["matmul"].half_registers and not REGISTRY["matmul"].widen_half


def _adam_graph(read_term: bool = True) -> tuple[popxl.Ir, popxl.HostToDeviceStream, list]:
    """The optimiser tutorial's Adam step on a float32 weight with a float16 first moment: the
    float16 update term, held in float32, read by the weight's ``scaled_add_`` (and by a
    ``mul`` where ``read_term``; else the five steps are one Adam chain). Epsilon 1000 makes
    updates of 1e-3 to 1e-9 (subnormals, underflow); a gradient past float16's range makes the
    moment and its update infinite, and NaN passes through."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        g_s = popxl.h2d_stream((256,), popxl.float32, "x")
        g = ops.host_load(g_s)
        w = popxl.variable(np.linspace(-3, 3, 256, dtype=np.float32), popxl.float32, "w")
        first = popxl.variable(np.zeros(256, np.float16), F16, "first")
        second = popxl.variable(np.zeros(256, np.float32), popxl.float32, "second")
        step = popxl.variable(np.zeros((), np.float32), popxl.float32, "step")
        ops.var_updates.accumulate_moving_average_(first, g, f=0.9)
        ops.var_updates.accumulate_moving_average_square_(second, g, f=0.999)
        update = ops.var_updates.adam_updater(first, second, weight=w, time_step=step,
                                              weight_decay=0.0, beta1=0.9, beta2=0.999,
                                              epsilon=1000.0)
        ops.scaled_add_(w, update, b=-0.5)
        streams = _stored(update * 1.0) if read_term else _stored(first + 0.0)
    return ir, g_s, streams


def _adam_feeds() -> list[np.ndarray]:
    rng = np.random.default_rng(12)
    feeds = []
    for _ in range(2):
        g = (rng.normal(size=256) * 10.0 ** rng.uniform(-4, 3, 256)).astype(np.float32)
        g[[3, 30, 31]] = [np.nan, 1e6, -1e6]
        feeds.append(g)
    return feeds


@pytest.mark.parametrize("backend", BACKENDS)
def test_bits_loops_round_their_results_on_store(backend: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """An update term of a ``loops.bits`` loop held in float32 is rounded as the loop stores
    it (no rounding step), and on the numba backend the float16 loops run inside fused
    segments on views of the arrays' bits: the bits of the per-op forms and the
    interpreter."""
    with np.errstate(over="ignore", invalid="ignore"):
        got, source = _checked(_adam_graph, _adam_feeds(), backend, monkeypatch)
    rounded = [line for line in source.splitlines() if "round_half" in line]
    assert not any("= adam_updater " in line for line in rounded)
    assert "%adam_updater:f16" in source
    update = got[0]
    assert np.isinf(update).any() and np.isnan(update).any()
    assert (np.abs(update[update != 0]) < 6.1e-5).any()  # float16 subnormals
    if backend == "numba":
        fused = [line for line in source.splitlines() if "# fused:" in line]
        assert any("= adam_updater " in line for line in fused)
        assert any("= accumulate_moving_average_ " in line for line in fused)
        assert ".view(np.uint16)" in source


@pytest.mark.skipif(not HAS_NUMBA, reason="the Adam chain's loop needs numba (xlgraph[fast])")
def test_float16_adam_chain_is_one_loop_with_the_same_bits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The tutorial's Adam with a float16 first moment (the gradient's rounding, both moving
    averages, the float16 term and its ``scaled_add_``) runs as one ``adam_step`` loop on the
    moment's bits: the bits of the per-op forms and the interpreter."""
    with np.errstate(over="ignore", invalid="ignore"):
        got, source = _checked(lambda: _adam_graph(read_term=False), _adam_feeds(), "numba",
                               monkeypatch)
    lines = [line for line in source.splitlines() if not line.startswith("#")]
    (chain,) = [line for line in lines if "j_adam_step" in line]
    assert "= cast " in chain and "= scaled_add_ " in chain  # the rounding and the update
    assert not any("round_half" in line or "adam_updater(" in line for line in lines)
    first = got[0]
    assert np.isinf(first).any() and np.isnan(first).any()
