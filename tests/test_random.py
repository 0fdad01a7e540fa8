"""Seeds and random ops: determinism, statistics, and dropout's mask reuse in the gradient."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import xlgraph
from xlgraph import ops
from xlgraph.errors import DTypeError
from xlgraph.transforms import autodiff

Build = Callable[[xlgraph.Tensor], list[xlgraph.Tensor]]


def run(build: Build, seed: np.ndarray) -> list[np.ndarray]:
    """Run ``build(seed_tensor)`` in a Session with ``seed`` streamed in; return its outputs."""
    ir = xlgraph.Ir()
    with ir.main_graph:
        stream = xlgraph.h2d_stream((2,), xlgraph.uint32, "seed")
        outs = build(ops.host_load(stream))
        d2h = [xlgraph.d2h_stream(t.shape, t.dtype, f"out{i}") for i, t in enumerate(outs)]
        for s, t in zip(d2h, outs):
            ops.host_store(s, t)
    with xlgraph.Session(ir, "cpu") as session:
        got = session.run({stream: seed})
    return [got[s] for s in d2h]


# -- create_seeds ------------------------------------------------------------------------------
def test_create_seeds_is_deterministic_uint32_pairs() -> None:
    seed = xlgraph.create_seeds(42)
    assert seed.shape == (2,) and seed.dtype == np.uint32
    np.testing.assert_array_equal(seed, xlgraph.create_seeds(42))
    np.testing.assert_array_equal(xlgraph.create_seeds(40, offset=2), seed)
    assert not np.array_equal(seed, xlgraph.create_seeds(43))
    drawn = np.random.default_rng(42).integers(0, 2**32, size=2, dtype=np.uint64)
    np.testing.assert_array_equal(seed, drawn.astype(np.uint32))


@pytest.mark.parametrize(("kwargs", "shape"), [
    ({"batches_per_step": 3}, (3, 2)),
    ({"batches_per_step": 3, "gradient_accumulation_factor": 2, "replicas": 4}, (3, 2, 4, 2)),
    ({"replicas": 2}, (2, 2)),
])
def test_create_seeds_shape_squeezes_unit_dims(kwargs, shape) -> None:
    seeds = xlgraph.create_seeds(7, **kwargs)
    assert seeds.shape == shape and seeds.dtype == np.uint32
    pairs = {tuple(p) for p in seeds.reshape(-1, 2)}
    assert len(pairs) == seeds.size // 2


# -- split_random_seed -------------------------------------------------------------------------
def test_split_random_seed_gives_distinct_deterministic_seeds() -> None:
    seed = xlgraph.create_seeds(3)
    first = run(lambda s: ops.split_random_seed(s, n=3) + [s + 1], seed)
    again = run(lambda s: ops.split_random_seed(s, n=3), seed)
    other = run(lambda s: ops.split_random_seed(s, n=3), xlgraph.create_seeds(4))
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert all(a.dtype == np.uint32 and a.shape == (2,) for a in first)
    distinct = {tuple(a) for a in first[:3] + other + [seed]}
    assert len(distinct) == 7
    np.testing.assert_array_equal(first[3], seed + np.uint32(1))


def test_split_random_seed_defaults_to_two() -> None:
    ir = xlgraph.Ir()
    with ir.main_graph:
        seed = xlgraph.variable(xlgraph.create_seeds(0), xlgraph.uint32)
        assert len(ops.split_random_seed(seed)) == 2


# -- uniform and normal ------------------------------------------------------------------------
def test_random_uniform_statistics_and_determinism() -> None:
    seed = xlgraph.create_seeds(1)
    (u,) = run(lambda s: [ops.random_uniform(s, (200_000,), low=-2.0, high=3.0)], seed)
    assert u.dtype == np.float32
    assert u.min() >= -2.0 and u.max() < 3.0
    assert u.mean() == pytest.approx(0.5, abs=0.02)
    assert u.var() == pytest.approx(25 / 12, rel=0.02)
    hist, _ = np.histogram(u, bins=10, range=(-2, 3))
    np.testing.assert_allclose(hist / u.size, 0.1, atol=0.003)
    (again,) = run(lambda s: [ops.random_uniform(s, (200_000,), low=-2.0, high=3.0)], seed)
    np.testing.assert_array_equal(u, again)
    (other,) = run(lambda s: [ops.random_uniform(s, (200_000,), -2.0, 3.0)], seed + 1)
    assert np.mean(u == other) < 0.001


def test_random_normal_statistics_and_dtype() -> None:
    seed = xlgraph.create_seeds(2)
    z, h = run(lambda s: [ops.random_normal(s, (500, 400), mean=1.5, std=0.5),
                          ops.random_normal(s, (3, 4), dtype=xlgraph.float16)], seed)
    assert z.shape == (500, 400) and z.dtype == np.float32 and h.dtype == np.float16
    assert z.mean() == pytest.approx(1.5, abs=0.005)
    assert z.std() == pytest.approx(0.5, rel=0.01)
    assert np.mean(np.abs(z - 1.5) < 0.5) == pytest.approx(0.6827, abs=0.005)
    (again,) = run(lambda s: [ops.random_normal(s, (500, 400), mean=1.5, std=0.5)], seed)
    np.testing.assert_array_equal(z, again)


def test_split_seeds_give_independent_streams() -> None:
    def build(s):
        a, b = ops.split_random_seed(s)
        return [ops.random_normal(a, (20_000,)), ops.random_normal(b, (20_000,)),
                ops.random_normal(s, (20_000,))]

    a, b, c = run(build, xlgraph.create_seeds(9))
    for x, y in [(a, b), (a, c), (b, c)]:
        assert abs(np.corrcoef(x, y)[0, 1]) < 0.03


# -- dropout -----------------------------------------------------------------------------------
def dropout_with_grad(x: np.ndarray, dy: np.ndarray, seed: np.ndarray, build) -> tuple:
    """Forward ``build(x, seed)`` in a subgraph and its autodiff gradient for ``dy``."""
    ir = xlgraph.Ir()
    with ir.main_graph:
        graph = ir.create_graph(build, xlgraph.TensorSpec(x.shape, xlgraph.float32),
                                xlgraph.TensorSpec((2,), xlgraph.uint32))
        info = autodiff(graph, grads_required=[graph.inputs[0]])
        streams = [xlgraph.h2d_stream(a.shape, a.dtype, n)
                   for a, n in [(x, "x"), (seed, "seed"), (dy, "dy")]]
        x_t, seed_t, dy_t = (ops.host_load(s) for s in streams)
        site = ops.call_with_info(graph, x_t, seed_t)
        (dx,) = ops.call(info.graph, dy_t, inputs_dict=info.inputs_dict(site))
        outs = [xlgraph.d2h_stream(t.shape, t.dtype, n)
                for t, n in [(site.outputs[0], "y"), (dx, "dx")]]
        ops.host_store(outs[0], site.outputs[0])
        ops.host_store(outs[1], dx)
    with xlgraph.Session(ir, "cpu") as session:
        got = session.run(dict(zip(streams, [x, seed, dy])))
    return got[outs[0]], got[outs[1]]


def _data(*shape: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (rng.uniform(0.5, 2.0, shape).astype(np.float32),
            rng.normal(size=shape).astype(np.float32))


def test_dropout_gradient_reuses_the_forward_mask() -> None:
    p = 0.4
    x, dy = _data(300, 200)
    seed = xlgraph.create_seeds(5)
    y, dx = dropout_with_grad(x, dy, seed, lambda t, s: ops.dropout(t, s, p))
    kept = y != 0
    assert abs(kept.mean() - (1 - p)) < 0.01
    np.testing.assert_allclose(y[kept], x[kept] / (1 - p), rtol=1e-6)
    np.testing.assert_allclose(dx, np.where(kept, dy / (1 - p), 0), rtol=1e-6)
    y_again, _ = dropout_with_grad(x, dy, seed, lambda t, s: ops.dropout(t, s, p))
    np.testing.assert_array_equal(y, y_again)
    y_other, _ = dropout_with_grad(x, dy, seed + 1, lambda t, s: ops.dropout(t, s, p))
    assert np.mean((y_other != 0) != kept) > 0.3


def test_dropout_with_zero_ratio_is_the_identity() -> None:
    x, dy = _data(4, 5)
    y, dx = dropout_with_grad(x, dy, xlgraph.create_seeds(0), lambda t, s: ops.dropout(t, s, 0.0))
    np.testing.assert_array_equal(y, x)
    np.testing.assert_array_equal(dx, dy)


def test_shaped_dropout_drops_whole_broadcast_slices() -> None:
    x, dy = _data(50, 8)
    y, dx = dropout_with_grad(x, dy, xlgraph.create_seeds(6),
                              lambda t, s: ops.shaped_dropout(t, s, (1, 8), 0.5))
    kept = y != 0
    columns = kept[0]
    assert 0 < columns.sum() < 8
    np.testing.assert_array_equal(kept, np.broadcast_to(columns, kept.shape))
    np.testing.assert_allclose(y, x * columns * 2, rtol=1e-6)
    np.testing.assert_allclose(dx, dy * columns * 2, rtol=1e-6)


def test_random_ops_reject_bad_seeds_and_ratios() -> None:
    ir = xlgraph.Ir()
    with ir.main_graph:
        x = xlgraph.variable(np.ones((2, 3), np.float32))
        seed = xlgraph.variable(xlgraph.create_seeds(0), xlgraph.uint32)
        with pytest.raises(DTypeError, match=r"random_normal: a seed must be a uint32.*\(2,\)"):
            ops.random_normal(xlgraph.variable(np.zeros(3, np.uint32)), (2,))
        with pytest.raises(DTypeError, match="seed"):
            ops.dropout(x, x, 0.5)
        with pytest.raises(ValueError, match=r"\[0, 1\)"):
            ops.dropout(x, seed, 1.0)
        with pytest.raises(DTypeError, match="float"):
            ops.random_uniform(seed, (2,), dtype=xlgraph.int32)
