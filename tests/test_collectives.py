"""Collectives across replicas against numpy for several group layouts, and their gradients
by finite differences over all replicas."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph
from xlgraph import ops
from xlgraph.ops import collectives
from xlgraph.transforms import autodiff

R = 4
LAYOUTS = {  # name -> the groups of 4 replicas (None: all)
    "all": None, "pairs": (1, 2), "strided": (2, 2), "single": (1, 1),
    "assigned": [0, 1, 1, 0],
}
REDUCE = {"add": np.sum, "mean": np.mean, "mul": np.prod, "min": np.min, "max": np.max,
          "square_add": lambda s, axis: np.sum(s * s, axis=axis)}


def _grouping(ir: xlgraph.Ir, layout):
    if layout is None:
        return None
    if isinstance(layout, list):
        return ir.replica_grouping_from_assignments(layout)
    return ir.replica_grouping(*layout)


def _members(layout) -> list[tuple[int, ...]]:
    """Each replica's group, computed independently of ReplicaGrouping."""
    if layout is None:
        return [tuple(range(R))] * R
    if isinstance(layout, list):
        return [tuple(i for i in range(R) if layout[i] == layout[r]) for r in range(R)]
    stride, size = layout
    out = []
    for r in range(R):
        base = (r // (stride * size)) * stride * size + r % stride
        out.append(tuple(base + k * stride for k in range(size)))
    return out


def _run(build, data: np.ndarray, layout, dtype=xlgraph.float32):
    """Run ``build(t, group)`` on 4 replicas fed ``data`` (R, ...); returns (R, ...) output."""
    ir = xlgraph.Ir(replication=R)
    with ir.main_graph:
        s_in = xlgraph.h2d_stream(data.shape[1:], dtype, "x")
        y = build(ops.host_load(s_in), _grouping(ir, layout))
        s_out = xlgraph.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(s_out, y)
    session = xlgraph.Session(ir)
    with session:
        return session.run({s_in: data})[s_out]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("op", sorted(REDUCE))
def test_all_reduce_matches_numpy(op, layout):
    layout = LAYOUTS[layout]
    x = np.random.default_rng(0).uniform(0.5, 2, (R, 3, 2)).astype(np.float32)
    got = _run(lambda t, g: collectives.replicated_all_reduce(t, op, g), x, layout)
    want = np.stack([REDUCE[op](x[list(m)], axis=0) for m in _members(layout)])
    np.testing.assert_allclose(got, want, rtol=1e-6)
    inplace = _run(lambda t, g: collectives.replicated_all_reduce_(t * 1.0, op, g), x, layout)
    np.testing.assert_array_equal(inplace, got)


@pytest.mark.parametrize("op, fn", [("and", np.all), ("or", np.any)])
def test_logical_all_reduce(op, fn):
    x = np.random.default_rng(1).uniform(size=(R, 5)) > 0.3
    got = _run(lambda t, g: collectives.replicated_all_reduce(t, op, g), x, (1, 2),
               xlgraph.bool)
    want = np.stack([fn(x[list(m)], axis=0) for m in _members((1, 2))])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_all_gather_reduce_scatter_and_slices_match_numpy(layout):
    layout = LAYOUTS[layout]
    members = _members(layout)
    x = np.random.default_rng(2).normal(size=(R, 3, 2)).astype(np.float32)
    stacked = _run(lambda t, g: collectives.replicated_all_gather(t, 1, g, "new_axis"), x,
                   layout)
    np.testing.assert_array_equal(stacked, np.stack([np.stack(x[list(m)], 1) for m in members]))
    joined = _run(lambda t, g: collectives.replicated_all_gather(t, 0, g, "concat"), x, layout)
    np.testing.assert_array_equal(joined, np.stack([np.concatenate(x[list(m)]) for m in members]))

    scattered = _run(lambda t, g: collectives.replicated_reduce_scatter(t, "add", g), x, layout)
    for r, m in enumerate(members):
        flat = x[list(m)].sum(axis=0).reshape(-1)
        flat = np.concatenate([flat, np.zeros(-flat.size % len(m), flat.dtype)])
        np.testing.assert_allclose(scattered[r], np.split(flat, len(m))[m.index(r)], rtol=1e-6)

    y = np.random.default_rng(3).normal(size=(R, 4, 3)).astype(np.float32)
    sliced = _run(lambda t, g: collectives.replicated_slice(t, 0, g), y, layout)
    sharded = _run(lambda t, g: collectives.replica_sharded_slice(t, g), y, layout)
    for r, m in enumerate(members):
        block = np.split(y[r], len(m))[m.index(r)]
        expected = block[0] if len(m) == len(y[r]) else block  # one row each: PopXL drops it
        np.testing.assert_array_equal(sliced[r], expected)
        np.testing.assert_array_equal(sharded[r], np.split(y[r].reshape(-1), len(m))[m.index(r)])


def _replicated_gradients(fwd, x: np.ndarray, seed: np.ndarray) -> tuple[np.ndarray, float]:
    """``d/dx`` of ``sum over replicas of <seed, fwd(x)>`` via autodiff, and that sum."""
    ir = xlgraph.Ir(replication=R)
    with ir.main_graph:
        s_x = xlgraph.h2d_stream(x.shape[1:], xlgraph.float64, "x")
        graph = ir.create_graph(fwd, s_x.spec)
        s_seed = xlgraph.h2d_stream(graph.outputs[0].shape, xlgraph.float64, "seed")
        grad = autodiff(graph)
        site = ops.call_with_info(graph, ops.host_load(s_x))
        seed_t = ops.host_load(s_seed)
        (dx,) = ops.call(grad.graph, seed_t, inputs_dict=grad.inputs_dict(site))
        s_dx = xlgraph.d2h_stream(dx.shape, dx.dtype, "dx")
        s_y = xlgraph.d2h_stream(site.outputs[0].shape, xlgraph.float64, "y")
        ops.host_store(s_dx, dx)
        ops.host_store(s_y, site.outputs[0])
    session = xlgraph.Session(ir)
    with session:
        out = session.run({s_x: x, s_seed: seed})
    return out[s_dx], float((out[s_y] * seed).sum())


GRAD_CASES = {
    "all_reduce_add": lambda g: lambda t: collectives.replicated_all_reduce(t * t, "add", g),
    "all_reduce_mean": lambda g: lambda t: collectives.replicated_all_reduce(t, "mean", g),
    "all_reduce_mul": lambda g: lambda t: collectives.replicated_all_reduce(t, "mul", g),
    "all_reduce_max": lambda g: lambda t: collectives.replicated_all_reduce(t, "max", g),
    "all_reduce_square_add": lambda g: lambda t: collectives.replicated_all_reduce(
        t, "square_add", g),
    "reduce_scatter": lambda g: lambda t: collectives.replicated_reduce_scatter(t * t, "add", g),
    "reduce_scatter_mean": lambda g: lambda t: collectives.replicated_reduce_scatter(
        t, "mean", g),
    "sharded_slice": lambda g: lambda t: collectives.replica_sharded_slice(t * t, g),
}


@pytest.mark.parametrize("layout", ["all", "pairs", "strided"])
@pytest.mark.parametrize("case", sorted(GRAD_CASES))
def test_collective_gradients_match_finite_differences(case, layout):
    rng = np.random.default_rng(4)
    x = rng.uniform(0.5, 2.0, (R, 4, 2))
    probe = xlgraph.Ir(replication=R)
    fwd = GRAD_CASES[case](_grouping(probe, LAYOUTS[layout]))
    with probe.main_graph:
        shape = fwd(ops.host_load(xlgraph.h2d_stream((4, 2), xlgraph.float64))).shape
    seed = rng.normal(size=(R, *shape))
    dx, _ = _replicated_gradients(fwd, x, seed)
    eps = 1e-6
    numeric = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        plus, minus = x.copy(), x.copy()
        plus[idx] += eps
        minus[idx] -= eps
        numeric[idx] = (_replicated_gradients(fwd, plus, seed)[1]
                        - _replicated_gradients(fwd, minus, seed)[1]) / (2 * eps)
    np.testing.assert_allclose(dx, numeric, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("layout", ["all", "pairs", "strided", "single"])
@pytest.mark.parametrize("output_shape", ["new_axis", "concat", "auto"])
def test_all_gather_gradient_is_the_local_slice(layout, output_shape):
    """PopART differentiates replicated_all_gather as a reduce-scatter with its Local operator:
    each replica takes its own slice of the incoming gradient, with no sum over replicas."""
    members = _members(LAYOUTS[layout])
    x = np.random.default_rng(5).uniform(0.5, 2.0, (R, 4, 2))

    def fwd(t, g):
        return collectives.replicated_all_gather(ops.sin(t), 0, g, output_shape)

    probe = xlgraph.Ir(replication=R)
    with probe.main_graph:
        shape = fwd(ops.host_load(xlgraph.h2d_stream((4, 2), xlgraph.float64)),
                    _grouping(probe, LAYOUTS[layout])).shape
    seed = np.random.default_rng(6).normal(size=(R, *shape))
    dx, _ = _replicated_gradients(lambda t: fwd(t, _grouping(probe, LAYOUTS[layout])), x, seed)
    for r, m in enumerate(members):
        own = np.split(seed[r], len(m))[m.index(r)].reshape(4, 2)
        np.testing.assert_allclose(dx[r], own * np.cos(x[r]), rtol=1e-12)
    gathered = np.stack([np.concatenate(np.sin(x[list(m)])) for m in members])
    same, _ = _replicated_gradients(lambda t: fwd(t, _grouping(probe, LAYOUTS[layout])), x,
                                    gathered.reshape(R, *shape))
    np.testing.assert_allclose(same, np.sin(x) * np.cos(x), rtol=1e-12)  # dy = y: dx = x's own


@pytest.mark.parametrize("layout", ["all", "pairs", "strided", "single"])
def test_replicated_slice_drops_a_one_element_axis_and_gathers_its_gradient(layout):
    members = _members(LAYOUTS[layout])
    x = np.random.default_rng(7).uniform(0.5, 2.0, (R, 4, 3))
    fwd = lambda t: collectives.replicated_slice(t * t, 0,  # noqa: E731
                                                 _grouping(xlgraph.Ir(replication=R),
                                                           LAYOUTS[layout]))
    size = len(members[0])
    shape = (3,) if size == 4 else (4 // size, 3)
    seed = np.random.default_rng(8).normal(size=(R, *shape))
    dx, _ = _replicated_gradients(fwd, x, seed)
    for r, m in enumerate(members):
        gathered = np.concatenate([seed[k].reshape(-1, 3) for k in m])
        np.testing.assert_allclose(dx[r], 2 * x[r] * gathered, rtol=1e-12)
    ir = xlgraph.Ir(replication=R)
    with ir.main_graph, pytest.raises(ValueError, match="equal slices"):
        collectives.replicated_slice(xlgraph.variable(np.zeros((3, 2), np.float32)), 0)


@pytest.mark.parametrize("builder, forward_sums, backward_sums", [
    (collectives.all_reduce, True, True),
    (collectives.all_reduce_identical_inputs, False, True),
    (collectives.all_reduce_identical_grad_inputs, True, False),
])
def test_all_reduce_within_a_replica(builder, forward_sums, backward_sums):
    ir = xlgraph.Ir()
    a, b = np.array([1.0, 2.0]), np.array([10.0, 20.0])
    with ir.main_graph:
        def fwd(x, y):
            return builder([x, y])

        graph = ir.create_graph(fwd, xlgraph.TensorSpec((2,), xlgraph.float64),
                                xlgraph.TensorSpec((2,), xlgraph.float64))
        grad = autodiff(graph)
        site = ops.call_with_info(graph, xlgraph.constant(a, xlgraph.float64),
                                 xlgraph.constant(b, xlgraph.float64))
        dys = [xlgraph.constant(np.array([v, v]), xlgraph.float64) for v in (1.0, 3.0)]
        dxs = ops.call(grad.graph, *dys, inputs_dict=grad.inputs_dict(site))
        streams = [xlgraph.d2h_stream((2,), xlgraph.float64, n) for n in ("o0", "o1", "d0", "d1")]
        for s, t in zip(streams, [*site.outputs[:2], *dxs]):
            ops.host_store(s, t)
    session = xlgraph.Session(ir)
    with session:
        o0, o1, d0, d1 = session.run().values()
    np.testing.assert_array_equal(o0, a + b if forward_sums else a)
    np.testing.assert_array_equal(o1, a + b if forward_sums else b)
    np.testing.assert_array_equal(d0, [4.0, 4.0] if backward_sums else [1.0, 1.0])
    np.testing.assert_array_equal(d1, [4.0, 4.0] if backward_sums else [3.0, 3.0])


def test_invalid_collective_op_lists_the_valid_ones():
    ir = xlgraph.Ir(replication=2)
    with ir.main_graph, pytest.raises(ValueError, match="square_add"):
        collectives.replicated_all_reduce(xlgraph.constant(1.0), "sum")
