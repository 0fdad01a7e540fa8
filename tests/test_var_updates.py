"""``ops.var_updates``: accumulators and the Adam-family updaters, against numpy re-implementations
of the formulas and against ``torch.optim`` step for step."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph
from xlgraph import ops
from xlgraph.ops import var_updates as vu

RNG = np.random.default_rng(0)
T0, X0 = RNG.normal(size=(3, 4)).astype(np.float32), RNG.normal(size=(3, 4)).astype(np.float32)


def _apply(update, scalar_as_tensor: bool, *scalars: float) -> np.ndarray:
    """Run ``update(t, X, *scalars)`` once on a variable ``t = T0``; return the new ``t``."""
    ir = xlgraph.Ir()
    with ir.main_graph:
        t = xlgraph.variable(T0, name="t")
        x = xlgraph.constant(X0)
        args = [xlgraph.constant(np.float32(s)) if scalar_as_tensor else s for s in scalars]
        out = update(t, x, *args)
        assert out.shape == t.shape
    session = xlgraph.Session(ir)
    with session:
        session.run()
    return session.get_tensor_data(t)


CASES = [
    (vu.accumulate_square_, (0.5,), lambda t, x, f: t + f * x * x),
    (vu.accumulate_mean_, (3.0,), lambda t, x, n: t * n / (n + 1) + x / (n + 1)),
    (vu.accumulate_moving_average_, (0.9,), lambda t, x, f: f * t + (1 - f) * x),
    (vu.accumulate_moving_average_square_, (0.99,), lambda t, x, f: f * t + (1 - f) * x * x),
    (lambda t, x, f: vu.accumulator_scale_(t, f), (-2.0,), lambda t, x, f: f * t),
    (lambda t, x: vu.accumulate_square_(t, x), (), lambda t, x: t + x * x),
]


@pytest.mark.parametrize("scalar_as_tensor", [False, True])
@pytest.mark.parametrize(("update", "scalars", "formula"), CASES)
def test_accumulators_follow_their_formulas(update, scalars, formula,
                                            scalar_as_tensor: bool) -> None:
    got = _apply(update, scalar_as_tensor, *scalars)
    np.testing.assert_allclose(got, formula(T0, X0, *scalars), rtol=1e-6, atol=1e-6)


def test_accumulate_mean_keeps_a_running_mean() -> None:
    xs = RNG.normal(size=(5, 3)).astype(np.float32)
    ir = xlgraph.Ir()
    with ir.main_graph:
        mean = xlgraph.variable(np.zeros(3, np.float32), name="mean")
        step = xlgraph.variable(np.float32(0), name="step")
        s = xlgraph.h2d_stream((3,), xlgraph.float32, "x")
        with xlgraph.in_sequence():
            vu.accumulate_mean_(mean, ops.host_load(s), step)
            vu.accumulate_(step, xlgraph.constant(np.float32(1)))
    session = xlgraph.Session(ir)
    with session:
        for x in xs:
            session.run({s: x})
    np.testing.assert_allclose(session.get_tensor_data(mean), xs.mean(0), rtol=1e-6)


def test_accumulator_zero_clears_nan_and_inf() -> None:
    ir = xlgraph.Ir()
    with ir.main_graph:
        t = xlgraph.variable(np.array([np.nan, np.inf, 2.0], np.float32), name="t")
        vu.accumulator_zero_(t)
    session = xlgraph.Session(ir)
    with session:
        session.run()
    np.testing.assert_array_equal(session.get_tensor_data(t), [0.0, 0.0, 0.0])


def test_sparse_accumulate_adds_gathered_slices_back() -> None:
    idx = np.array([[2, 0], [2, 1]])
    x = RNG.normal(size=(3, 2, 2)).astype(np.float32)  # shaped like gather(t, idx, axis=1)
    ir = xlgraph.Ir()
    with ir.main_graph:
        t = xlgraph.variable(np.ones((3, 4), np.float32), name="t")
        w = xlgraph.variable(np.zeros((3, 4), np.float32), name="w")
        with pytest.raises(xlgraph.errors.ShapeError, match="W"):
            vu.sparse_accumulate_(t, xlgraph.constant(x), idx, axis=1, W=t[0])
        vu.sparse_accumulate_(t, xlgraph.constant(x), idx, axis=1, f=0.5, W=w)
    session = xlgraph.Session(ir)
    with session:
        session.run()
    want = np.ones((3, 4), np.float32)
    for r in range(3):
        for (i, j), col in np.ndenumerate(idx):
            want[r, col] += 0.5 * x[r, i, j]
    np.testing.assert_allclose(session.get_tensor_data(t), want, rtol=1e-6)


# -- Adam family -------------------------------------------------------------------------------
def _numpy_adam(w, grads, lr, b1, b2, eps, wd, mode):
    """Reference optimisers written from their papers (float64)."""
    w = w.astype(np.float64)
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        if mode == "adamax":
            v = np.maximum(b2 * v, np.abs(g))
            upd = m / (1 - b1 ** t) / (v + eps) + wd * w
        else:
            v = b2 * v + (1 - b2) * g * g
            upd = (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps) + wd * w
        ratio = 1.0
        if mode == "lamb":
            r1, r2 = np.linalg.norm(w), np.linalg.norm(upd)
            ratio = r1 / r2 if r1 and r2 else 1.0
        w = w - lr * ratio * upd
    return w


def _xlgraph_optimiser(w0, grads, lr, b1, b2, eps, wd, mode, eps_in_max=0.0):
    """Train ``w0`` on the gradient sequence with var_updates; return (w, final step)."""
    ir = xlgraph.Ir()
    with ir.main_graph, xlgraph.in_sequence():
        w = xlgraph.variable(w0, name="w")
        m = xlgraph.variable(np.zeros_like(w0), name="m")
        v = xlgraph.variable(np.zeros_like(w0), name="v")
        step = xlgraph.variable(np.float32(0), name="step")
        s = xlgraph.h2d_stream(w0.shape, xlgraph.float32, "g")
        g = ops.host_load(s)
        vu.accumulate_moving_average_(m, g, b1)
        if mode == "adamax":
            vu.copy_var_update_(v, ops.maximum(v * b2, ops.abs(g) + eps_in_max))
            x = vu.adamax_updater(m, v, w, step, wd, beta1=b1, epsilon=eps)
        else:
            vu.accumulate_moving_average_square_(v, g, xlgraph.constant(np.float32(b2)))
            updater = vu.lamb_updater if mode == "lamb" else vu.adam_updater
            x = updater(m, v, weight=w, time_step=step, weight_decay=wd, beta1=b1, beta2=b2,
                        epsilon=eps)
        if mode == "lamb":
            vu.adam_var_update(w, x, ops.lamb_square(w), ops.lamb_square(x), learning_rate=lr)
        else:
            vu.adam_var_update(w, x, learning_rate=xlgraph.constant(np.float32(lr)))
    session = xlgraph.Session(ir)
    with session:
        for grad in grads:
            session.run({s: grad})
    return session.get_tensor_data(w), float(session.get_tensor_data(step))


@pytest.mark.parametrize("mode", ["adam", "lamb", "adamax"])
@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_updaters_match_numpy_reimplementations(mode: str, wd: float) -> None:
    w0 = RNG.normal(size=(4, 3)).astype(np.float32)
    grads = RNG.normal(size=(6, 4, 3)).astype(np.float32)
    hyper = {"lr": 0.05, "b1": 0.9, "b2": 0.99, "eps": 1e-6, "wd": wd, "mode": mode}
    got, step = _xlgraph_optimiser(w0, grads, **hyper)
    assert step == len(grads)  # the updater increments time_step in place
    np.testing.assert_allclose(got, _numpy_adam(w0, grads, **hyper), rtol=1e-5, atol=1e-6)


def test_lamb_trust_ratio_with_max_weight_norm() -> None:
    t, x = np.full((2, 2), 3.0, np.float32), np.full((2, 2), 0.5, np.float32)
    ir = xlgraph.Ir()
    with ir.main_graph:
        w = xlgraph.variable(t, name="w")
        xc = xlgraph.constant(x)
        vu.adam_var_update(w, xc, ops.lamb_square(w), ops.lamb_square(xc), learning_rate=0.1,
                           max_weight_norm=2.0)
    session = xlgraph.Session(ir)
    with session:
        session.run()
    ratio = min(np.linalg.norm(t), 2.0) / np.linalg.norm(x)  # ||w|| = 6 is clipped to 2
    np.testing.assert_allclose(session.get_tensor_data(w), t - 0.1 * ratio * x, rtol=1e-6)


def test_updater_argument_errors() -> None:
    ir = xlgraph.Ir()
    with ir.main_graph:
        m = xlgraph.variable(np.zeros(2, np.float32))
        step = xlgraph.variable(np.float32(0))
        with pytest.raises(ValueError, match="weight_decay needs the weight"):
            vu.adam_updater(m, m, weight_decay=0.1)
        with pytest.raises(ValueError, match="beta2"):
            vu.adam_updater(m, m, time_step=step, beta1=0.9)
        with pytest.raises(ValueError, match="needs time_step"):
            vu.adamax_updater(m, m, beta1=0.9)
        with pytest.raises(ValueError, match="learning_rate"):
            vu.adam_var_update(m, m)
        with pytest.raises(ValueError, match="r1 and r2"):
            vu.adam_var_update(m, m, r1=step, learning_rate=0.1)
        with pytest.raises(xlgraph.errors.ShapeError, match="one shape"):
            vu.adam_updater(m, xlgraph.variable(np.zeros(3, np.float32)))


@pytest.mark.parametrize("name", ["Adam", "AdamW", "Adamax"])
def test_step_for_step_against_torch_optim(name: str) -> None:
    torch = pytest.importorskip("torch")
    w0 = RNG.normal(size=(5, 3)).astype(np.float32)
    grads = RNG.normal(size=(8, 5, 3)).astype(np.float32)
    lr, b1, b2, eps = 0.01, 0.8, 0.95, 1e-6
    wd = 0.05 if name == "AdamW" else 0.0
    param = torch.nn.Parameter(torch.from_numpy(w0.copy()))
    opt = getattr(torch.optim, name)([param], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    for g in grads:
        param.grad = torch.from_numpy(g.copy())
        opt.step()
    if name == "Adamax":  # torch keeps eps inside the max: u = max(b2 u, |g| + eps)
        got, _ = _xlgraph_optimiser(w0, grads, lr, b1, b2, 0.0, wd, "adamax", eps_in_max=eps)
    else:
        got, _ = _xlgraph_optimiser(w0, grads, lr, b1, b2, eps, wd, "adam")
    np.testing.assert_allclose(got, param.detach().numpy(), rtol=1e-5, atol=1e-6)
