"""popxl-addons' ops whose data is split across the replicas of a group: the sharded
cross-entropy and the distributed layer norm over 1, 2, 4 and 8 replicas and every group
stride and size, against the unsplit computation in numpy (float64), with float64 finite
differences of the gradients; the within-replica sharded cross-entropy; float16 rounding."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph
from tests.addons.replicas import BACKENDS, CASES, case_id, members, run
from xlgraph.addons.ops.cross_entropy_sharded_loss import cross_entropy_sharded_loss
from xlgraph.addons.ops.cross_entropy_sharded_wr_loss import cross_entropy_sharded_wr_loss
from xlgraph.addons.ops.layer_norm_distributed import layer_norm_distributed
from xlgraph.op import REGISTRY, apply

IGNORE = -100


def _group(replicas, layout):
    return None if layout is None else xlgraph.Ir(replication=replicas).replica_grouping(*layout)


def _full_ce(z: np.ndarray, labels: np.ndarray, reduction: str) -> np.ndarray:
    """Cross-entropy of unsplit logits (float64), samples labelled IGNORE left out."""
    keep = labels != IGNORE
    logp = z - z.max(1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(1, keepdims=True))
    per = np.where(keep, -logp[np.arange(len(z)), np.where(keep, labels, 0)], 0.0)
    return {"mean": per.sum() / keep.sum(), "sum": per.sum(), "none": per}[reduction]


def _split(full: np.ndarray, groups, axis: int) -> np.ndarray:
    """Each replica's slice of its group's ``full[g]`` along ``axis``, by rank."""
    out = []
    for r, m in enumerate(groups):
        out.append(np.split(full[min(m)], len(m), axis)[m.index(r)])
    return np.stack(out)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_sharded_cross_entropy_over_replicas(case, reduction):
    replicas, layout = case
    groups = members(replicas, layout)
    size = len(groups[0])
    n, local = 5, 3
    rng = np.random.default_rng(replicas * 10 + size)
    full = rng.normal(0, 2, (replicas, n, local * size))  # row min(m) is group m's logits
    labels = rng.integers(0, local * size, (replicas, n))
    labels[:, 1] = IGNORE
    z = _split(full, groups, 1)
    shifted = np.stack([labels[min(m)] - local * m.index(r) for r, m in enumerate(groups)])
    shifted[:, 1] = IGNORE
    seed_shape = (n,) if reduction == "none" else ()
    seed = np.stack([rng.normal(size=seed_shape) for _ in range(replicas)])
    seed = np.stack([seed[min(m)] for m in groups])  # alike within each group
    g = _group(replicas, layout)
    (loss,), (dz,) = run(
        replicas, lambda t, i: [cross_entropy_sharded_loss(t, i, IGNORE, g, reduction)],
        [z, shifted.astype(np.int32)], lambda outs: [seed])
    for r, m in enumerate(groups):
        want = _full_ce(full[min(m)], labels[min(m)], reduction)
        np.testing.assert_allclose(loss[r], want, rtol=1e-12, atol=1e-12)

    direction = rng.normal(size=full.shape)

    def objective(eps: float) -> float:  # the loss counted once per group
        return sum(float(np.sum(seed[min(m)] * _full_ce(full[min(m)] + eps * direction[min(m)],
                                                        labels[min(m)], reduction)))
                   for m in set(groups))

    numeric = (objective(1e-6) - objective(-1e-6)) / 2e-6
    analytic = float(np.sum(dz * _split(direction, groups, 1)))
    assert analytic == pytest.approx(numeric, rel=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sharded_cross_entropy_on_both_backends(backend):
    rng = np.random.default_rng(0)
    z = rng.normal(size=(4, 6, 3)).astype(np.float32)
    labels = rng.integers(-2, 4, (4, 6)).astype(np.int32)
    (loss,), _ = run(4, lambda t, i: [cross_entropy_sharded_loss(t, i, reduction="none")],
                     [z, labels], backend=backend)
    full = np.concatenate(list(z), axis=1).astype(np.float64)
    logp = full - np.log(np.exp(full).sum(1, keepdims=True))
    want = sum(np.where((labels[k] >= 0) & (labels[k] < 3),
                        -logp[np.arange(6), np.clip(labels[k], 0, 2) + 3 * k], 0.0)
               for k in range(4))
    for r in range(4):
        np.testing.assert_allclose(loss[r], want, rtol=1e-5)


def test_sharded_cross_entropy_checks_its_inputs():
    ir = xlgraph.Ir(replication=2)
    with ir.main_graph:
        z = xlgraph.constant(np.zeros((4, 3), np.float32))
        with pytest.raises(xlgraph.errors.ShapeError, match="different sample counts"):
            cross_entropy_sharded_loss(z, xlgraph.constant(np.zeros(5, np.int32)))
        with pytest.raises(xlgraph.errors.ShapeError, match="rank 2"):
            cross_entropy_sharded_loss(z.reshape((12,)), xlgraph.constant(np.zeros(12, np.int32)))
        with pytest.raises(ValueError, match="reduction must be"):
            cross_entropy_sharded_loss(z, xlgraph.constant(np.zeros(4, np.int32)),
                                       reduction="max")


@pytest.mark.filterwarnings("ignore:invalid value encountered in divide")
def test_sharded_cross_entropy_everything_ignored_is_nan():
    """0 / 0, as popxl-addons' mean over no sample."""
    z = np.zeros((2, 3, 2), np.float32)
    labels = np.full((2, 3), IGNORE, np.int32)
    (loss,), _ = run(2, lambda t, i: [cross_entropy_sharded_loss(t, i, IGNORE)], [z, labels])
    assert np.isnan(loss).all()


def test_sharded_cross_entropy_float16_accumulates_in_float16():
    """The denominator is summed in the logits' dtype: float16 logits whose exponentials sum
    past float16's range of exact integers round like numpy's float16 sum."""
    z = np.zeros((1, 1, 3000), np.float16)  # sum of exp(0) = 3000 (float16 spacing 2 there)
    z[0, 0, 0] = 0.5
    (loss,), _ = run(1, lambda t, i: [cross_entropy_sharded_loss(t, i, reduction="none")],
                     [z, np.zeros((1, 1), np.int32)])
    assert loss.dtype == np.float16
    e = np.exp(z[0, 0] - z[0, 0].max())
    want = -(z[0, 0, 0] - z[0, 0].max() - np.log(np.sum(e, dtype=np.float16)))
    assert loss[0, 0] == np.float16(want)
    exact = -(0.5 - np.log(np.exp(0.5) + 2999))
    assert abs(float(loss[0, 0]) - exact) < 2e-3


def test_within_replica_sharded_cross_entropy():
    rng = np.random.default_rng(2)
    widths = (3, 5, 2)
    full = rng.normal(0, 2, (6, sum(widths)))
    labels = rng.integers(0, sum(widths), 6).astype(np.int32)
    shards = np.split(full, np.cumsum(widths)[:-1], axis=1)
    seed = rng.normal(size=6)

    def fwd(*ts):
        return [cross_entropy_sharded_wr_loss(list(ts[:3]), list(ts[3:]), ipus=[0, 1, 2])]

    (loss,), dzs = run(1, fwd, [s[None] for s in shards] + [labels[None]] * 3,
                       lambda outs: [seed[None]])
    np.testing.assert_allclose(loss[0], _full_ce(full, labels, "none"), rtol=1e-12)
    softmax = np.exp(full) / np.exp(full).sum(1, keepdims=True)
    want = seed[:, None] * (softmax - np.eye(sum(widths))[labels])
    np.testing.assert_allclose(np.concatenate([d[0] for d in dzs], 1), want, atol=1e-12)
    ir = xlgraph.Ir()
    with ir.main_graph:
        t = xlgraph.constant(np.zeros((2, 2), np.float32))
        i = xlgraph.constant(np.zeros(2, np.int32))
        with pytest.raises(ValueError, match="2 ipus for 3 logits"):
            cross_entropy_sharded_wr_loss([t, t, t], [i, i, i], ipus=[0, 1])
        with xlgraph.ipu(1):
            t1, i1 = t * 1.0, i + 0
        loss = cross_entropy_sharded_wr_loss([t, t1], [i, i1])  # ipus from the placement
        assert loss.ipu == 0 and loss.shape == (2,)
        with pytest.raises(ValueError, match=r"shard 1 .* IPU \[1, 1\], not on ipus\[1\] = 2"):
            cross_entropy_sharded_wr_loss([t, t1], [i, i1], ipus=[0, 2])


def _full_ln(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float):
    mu = x.mean(1)
    var = x.var(1)
    r = 1 / np.sqrt(var + eps)
    return (x - mu[:, None]) * r[:, None] * w + b, mu, r


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_layer_norm_distributed_over_replicas(case):
    replicas, layout = case
    groups = members(replicas, layout)
    size = len(groups[0])
    n, local, eps = 3, 2, 1e-3
    rng = np.random.default_rng(replicas + 10 * size)
    x_full = rng.normal(1.0, 2.0, (replicas, n, local * size))
    w_full = rng.uniform(0.5, 1.5, (replicas, local * size))
    b_full = rng.normal(size=(replicas, local * size))
    x, w, b = _split(x_full, groups, 1), _split(w_full, groups, 0), _split(b_full, groups, 0)
    g = _group(replicas, layout)
    seeds = [rng.normal(size=(replicas, n, local)), rng.normal(size=(replicas, n)),
             rng.normal(size=(replicas, n))]

    def fwd(t, wt, bt):
        return list(apply(REGISTRY["layer_norm_distributed"], [t, wt, bt],
                          {"epsilon": eps, "group": g}))

    (y, mu, r), grads = run(replicas, fwd, [x, w, b], lambda outs: seeds)
    for k, m in enumerate(groups):
        fy, fmu, fr = _full_ln(x_full[min(m)], w_full[min(m)], b_full[min(m)], eps)
        np.testing.assert_allclose(y[k], np.split(fy, size, 1)[m.index(k)], rtol=1e-10)
        np.testing.assert_allclose(mu[k], fmu, rtol=1e-10)
        np.testing.assert_allclose(r[k], fr, rtol=1e-10)

    dirs = [rng.normal(size=a.shape) for a in (x_full, w_full, b_full)]

    def objective(e: float) -> float:  # sum over replicas of <seed, output>
        total = 0.0
        for k, m in enumerate(groups):
            fy, fmu, fr = _full_ln(*(a[min(m)] + e * d[min(m)]
                                     for a, d in zip((x_full, w_full, b_full), dirs)), eps)
            total += np.sum(seeds[0][k] * np.split(fy, size, 1)[m.index(k)])
            total += np.sum(seeds[1][k] * fmu) + np.sum(seeds[2][k] * fr)
        return total

    numeric = (objective(1e-6) - objective(-1e-6)) / 2e-6
    analytic = sum(float(np.sum(gr * _split(d, groups, ax)))
                   for gr, d, ax in zip(grads, dirs, (1, 0, 0)))
    assert analytic == pytest.approx(numeric, rel=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_layer_norm_distributed_float16_has_float32_statistics(backend):
    """float16 data: the sums and statistics in float32, ``y`` rounded once to float16 (within
    one float16 rounding of the exact result); the statistics come out float32."""
    rng = np.random.default_rng(4)
    x = (rng.normal(100.0, 1.0, (2, 4, 64))).astype(np.float16)  # x^2 sums overflow float16
    w = rng.uniform(0.5, 1.5, (2, 64)).astype(np.float16)
    b = rng.normal(size=(2, 64)).astype(np.float16)

    def fwd(t, wt, bt):
        return list(apply(REGISTRY["layer_norm_distributed"], [t, wt, bt],
                          {"epsilon": 1e-5, "group": None}))

    (y, mu, r), _ = run(2, fwd, [x, w, b], backend=backend)
    assert y.dtype == np.float16 and mu.dtype == np.float32 and r.dtype == np.float32
    assert np.isfinite(y).all()
    fy, fmu, _ = _full_ln(np.concatenate(list(x.astype(np.float64)), 1),
                          np.concatenate(list(w.astype(np.float64))),
                          np.concatenate(list(b.astype(np.float64))), 1e-5)
    np.testing.assert_allclose(mu[0], fmu, rtol=1e-6)
    spacing = np.spacing(np.abs(fy).astype(np.float16)).astype(np.float64)
    got = np.concatenate(list(y.astype(np.float64)), 1)
    # one float16 rounding, plus float32 statistics of values near 100 (variance ~1)
    assert (np.abs(got - fy) <= spacing + 2e-3).all()


def test_layer_norm_distributed_returns_y_and_checks_ranks():
    ir = xlgraph.Ir(replication=2)
    with ir.main_graph:
        x = xlgraph.constant(np.zeros((3, 4), np.float32))
        w = xlgraph.constant(np.ones(4, np.float32))
        y = layer_norm_distributed(x, w, w)
        assert isinstance(y, xlgraph.Tensor) and y.spec == x.spec
        stats = y.producer.outputs[1:]
        assert [t.shape for t in stats] == [(3,), (3,)]
        with pytest.raises(xlgraph.errors.ShapeError, match=r"\(N, H_local\)"):
            layer_norm_distributed(x.reshape((12,)), w, w)


@pytest.mark.parametrize("case", [(1, None), (4, None), (4, (2, 2))], ids=case_id)
def test_layer_norm_distributed_stable_norm(case):
    """``enableStableNorm``: the variance from squared deviations (float32) stays accurate
    for rows far from zero, where ``sum(x^2)/H - mu^2`` cancels."""
    replicas, layout = case
    groups = members(replicas, layout)
    size = len(groups[0])
    rng = np.random.default_rng(12)
    full = (3000.0 + rng.normal(size=(replicas, 2, 8 * size))).astype(np.float32)
    x = _split(full, groups, 1)
    ones, zeros = np.ones((replicas, 8), np.float32), np.zeros((replicas, 8), np.float32)
    g = _group(replicas, layout)
    errors = {}
    for stable in (False, True):
        def fwd_opt(t, wt, bt, stable=stable):
            return [layer_norm_distributed(t, wt, bt, group=g).producer.outputs[2]]

        (r,), _ = run(replicas, fwd_opt, [x, ones, zeros], stable_norm=stable)
        want = np.stack([1 / np.sqrt(full[min(m)].astype(np.float64).var(1) + 1e-5)
                         for m in groups])
        errors[stable] = np.max(np.abs(r - want) / want)
    assert errors[True] < 1e-4 < errors[False], errors
