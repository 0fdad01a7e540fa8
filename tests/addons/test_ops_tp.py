"""popxl-addons' tensor-parallel collectives over 1, 2, 4 and 8 replicas, with every group
stride and size, on the numpy and numba backends: forward values against numpy, gradients
against the rule (identity or sum all-reduce) and, for the all-reduce, float64 finite
differences of the sum over replicas."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph
from tests.addons.replicas import BACKENDS, CASES, case_id, grouping, members, run
from xlgraph.addons.ops import replicated_all_reduce_TP as tp
from xlgraph.addons.ops import replicated_strided_collectives as strided

REDUCE = {"add": np.sum, "mean": np.mean}


def _group_reduce(x: np.ndarray, groups, op: str) -> np.ndarray:
    return np.stack([REDUCE[op](x[list(m)], axis=0) for m in groups])


def _builders(op: str):
    """(builder, forward sums, backward sums) for the three all-reduce flavours."""
    return [
        (strided.replicated_all_reduce_strided, True, True),
        (strided.replicated_all_reduce_strided_identical_inputs, False, True),
        (strided.replicated_all_reduce_strided_identical_grad_inputs, True, False),
    ]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", ["add", "mean"])
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_strided_all_reduce_family(case, op, backend):
    replicas, layout = case
    groups = members(replicas, layout)
    rng = np.random.default_rng(replicas)
    x = rng.normal(size=(replicas, 3, 2))
    seed = rng.normal(size=(replicas, 3, 2))
    probe = xlgraph.Ir(replication=replicas)
    group = grouping(probe, layout)
    for builder, fwd_sums, bwd_sums in _builders(op):
        g = None if group is None else xlgraph.Ir(replication=replicas).replica_grouping(*layout)
        (y,), (dx,) = run(replicas, lambda t, b=builder, g=g: [b(t, op, g)], [x],
                          lambda outs: [seed], backend)
        np.testing.assert_allclose(y, _group_reduce(x, groups, op) if fwd_sums else x,
                                   rtol=1e-12, err_msg=builder.__name__)
        np.testing.assert_allclose(dx, _group_reduce(seed, groups, op) if bwd_sums else seed,
                                   rtol=1e-12, err_msg=builder.__name__)


@pytest.mark.parametrize("case", [c for c in CASES if c[0] in (2, 8)], ids=case_id)
def test_all_reduce_gradient_matches_finite_differences(case):
    """The plain all-reduce is exact for the sum over replicas of <seed, y>."""
    replicas, layout = case
    groups = members(replicas, layout)
    rng = np.random.default_rng(7)
    x, seed, direction = (rng.normal(size=(replicas, 4)) for _ in range(3))
    g = None if layout is None else xlgraph.Ir(replication=replicas).replica_grouping(*layout)
    _, (dx,) = run(replicas, lambda t: [strided.replicated_all_reduce_strided(t * t, "mean", g)],
                   [x], lambda outs: [seed])

    def objective(v: np.ndarray) -> float:
        return float(np.sum(seed * _group_reduce(v * v, groups, "mean")))

    eps = 1e-6
    numeric = (objective(x + eps * direction) - objective(x - eps * direction)) / (2 * eps)
    assert np.sum(dx * direction) == pytest.approx(numeric, rel=1e-6)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_tp_pair_opens_and_closes_a_block(case):
    """Megatron's pattern: identical_inputs -> local work -> identical_grad_inputs computes
    the full product on every member; the input gradient is the full one too."""
    replicas, layout = case
    groups = members(replicas, layout)
    rng = np.random.default_rng(3)
    x = np.repeat(rng.normal(size=(1, 2, 3)), replicas, 0)  # alike on every member
    w = rng.normal(size=(replicas, 3, 4))  # this member's columns ...
    v = rng.normal(size=(replicas, 4, 3))  # ... and rows
    g = None if layout is None else xlgraph.Ir(replication=replicas).replica_grouping(*layout)

    def block(t, a, b):
        h = tp.replicated_all_reduce_identical_inputs(t, group=g) @ a
        return [tp.replicated_all_reduce_identical_grad_inputs(h @ b, group=g)]

    seed = np.repeat(rng.normal(size=(1, 2, 3)), replicas, 0)
    (y,), (dx, _, _) = run(replicas, block, [x, w, v], lambda outs: [seed])
    for r, m in enumerate(groups):
        full = sum(x[r] @ w[k] @ v[k] for k in m)
        np.testing.assert_allclose(y[r], full, rtol=1e-12)
        np.testing.assert_allclose(dx[r], sum(seed[r] @ (w[k] @ v[k]).T for k in m), rtol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_strided_all_gather_and_reduce_scatter(case, backend):
    replicas, layout = case
    groups = members(replicas, layout)
    rng = np.random.default_rng(5)
    x = rng.normal(size=(replicas, 3, 3)).astype(np.float32)  # 9 elements: padded for G > 1
    g = None if layout is None else xlgraph.Ir(replication=replicas).replica_grouping(*layout)
    (gathered, summed, averaged), _ = run(replicas, lambda t: [
        strided.replicated_all_gather_strided(t, g),
        strided.replicated_reduce_scatter_strided(t, "add", g),
        strided.replicated_reduce_scatter_strided(t, "mean", g)], [x], backend=backend)
    for r, m in enumerate(groups):
        np.testing.assert_array_equal(gathered[r], np.concatenate([x[k].ravel() for k in m]))
        size = len(m)
        chunk = -(-9 // size)
        for got, op in ((summed, "add"), (averaged, "mean")):
            flat = np.pad(REDUCE[op](x[list(m)], axis=0).ravel(), (0, chunk * size - 9))
            rank = m.index(r)
            np.testing.assert_allclose(got[r], flat[rank * chunk:(rank + 1) * chunk], rtol=1e-6)


def test_tp_family_accepts_only_add():
    ir = xlgraph.Ir(replication=2)
    with ir.main_graph:
        t = xlgraph.constant(np.ones(3, np.float32))
        for builder in (tp.replicated_all_reduce, tp.replicated_all_reduce_identical_inputs,
                        tp.replicated_all_reduce_identical_grad_inputs):
            with pytest.raises(xlgraph.errors.ArgumentError, match="'add'.*got 'mean'"):
                builder(t, "mean")
        with pytest.raises(xlgraph.errors.ArgumentError, match="got 'max'"):
            strided.replicated_all_reduce_strided(t, "max")


@pytest.mark.parametrize("case", [c for c in CASES if c[0] == 4], ids=case_id)
def test_reduce_scatter_then_all_gather_round_trips_a_sharded_tensor(case):
    """With ``configure_output_for_replicated_tensor_sharding`` the shard carries the input's
    shape as meta-shape, and the strided all-gather brings back the reduced tensor whole."""
    replicas, layout = case
    groups = members(replicas, layout)
    x = np.random.default_rng(8).normal(size=(replicas, 3, 5))
    g = None if layout is None else xlgraph.Ir(replication=replicas).replica_grouping(*layout)

    def fwd(t):
        shard = strided.replicated_reduce_scatter_strided(t, "add", g, True)
        assert shard.meta_shape == (3, 5)
        return [strided.replicated_all_gather_strided(shard, g)]

    (whole,), _ = run(replicas, fwd, [x])
    for r, m in enumerate(groups):
        np.testing.assert_allclose(whole[r], x[list(m)].sum(0), rtol=1e-12)


def test_all_reduce_strided_graph_reduces_each_named_input():
    replicas = 4
    x = np.random.default_rng(9).normal(size=(replicas, 2))
    y = np.random.default_rng(10).normal(size=(replicas, 3))

    def fwd(a, b):
        group = xlgraph.gcg().ir.replica_grouping(2, 2)
        graph, names = strided.replicated_all_reduce_strided_graph([a, b], "mean", group)
        assert names == [a.name, b.name] and graph.args.to_dict().keys() == {a.name, b.name}
        return list(xlgraph.ops.call(graph.graph, a, b))

    (ra, rb), _ = run(replicas, fwd, [x, y])
    groups = members(replicas, (2, 2))
    np.testing.assert_allclose(ra, _group_reduce(x, groups, "mean"), rtol=1e-12)
    np.testing.assert_allclose(rb, _group_reduce(y, groups, "mean"), rtol=1e-12)
