"""The training-step builder: gradients, loss decrease, device iterations, graphs and seeds."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph
from xlgraph import TensorSpec, nn, ops, optim, training

F32, I32 = xlgraph.float32, xlgraph.int32


def mse(y, t):
    d = y - t
    return ops.mean(d * d)


class TinyNet(nn.Layer):
    def __init__(self, n_in=3, hidden=5, n_out=2):
        super().__init__()
        self.fc1 = nn.Linear(n_in, hidden)
        self.fc2 = nn.Linear(hidden, n_out)

    def build(self, x):
        return self.fc2(ops.tanh(self.fc1(x)))


def np_tiny(p, x):
    h = np.tanh(x @ p["fc1.weight"].T + p["fc1.bias"])
    return h @ p["fc2.weight"].T + p["fc2.bias"]


def _data(n_steps, batch=4, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_steps, batch, 3)).astype(np.float32)
    t = np.stack([np.sin(x[..., 0]), x[..., 1] * x[..., 2]], -1).astype(np.float32)
    return x, t


def _build(n, opt, **kw):
    ir = xlgraph.Ir()
    step = training.build_train_step(
        ir, TinyNet(), mse, opt, inputs=[TensorSpec((4, 3), F32)],
        targets=[TensorSpec((4, 2), F32)], num_host_transfers=n, init_seed=0, **kw)
    return ir, step


def _values(session, step):
    return {k: session.get_tensor_data(v) for k, v in step.params.items()}


def test_gradients_match_finite_differences():
    """With SGD at lr 1 one step moves every parameter by exactly minus its gradient."""
    ir, step = _build(1, optim.SGD(lr=1.0))
    x, t = _data(1)
    with xlgraph.Session(ir) as session:
        before = _values(session, step)
        loss = step.run(session, x[0], t[0])
        after = _values(session, step)
    p64 = {k: v.astype(np.float64) for k, v in before.items()}

    def loss_of(p):
        d = np_tiny(p, x[0].astype(np.float64)) - t[0]
        return np.mean(d * d)

    np.testing.assert_allclose(loss[0], loss_of(p64), rtol=1e-5)
    eps = 1e-6
    for name, value in p64.items():
        fd = np.zeros_like(value)
        for idx in np.ndindex(value.shape):
            plus, minus = dict(p64), dict(p64)
            plus[name] = value.copy()
            minus[name] = value.copy()
            plus[name][idx] += eps
            minus[name][idx] -= eps
            fd[idx] = (loss_of(plus) - loss_of(minus)) / (2 * eps)
        np.testing.assert_allclose(before[name] - after[name], fd, rtol=1e-3, atol=2e-6,
                                   err_msg=name)


def test_device_iterations_equal_single_steps():
    x, t = _data(4)
    ir4, step4 = _build(4, optim.Adam(lr=0.01))
    with xlgraph.Session(ir4) as s4:
        losses4 = step4.run(s4, x, t)
        after4 = _values(s4, step4)
    ir1, step1 = _build(1, optim.Adam(lr=0.01))
    with xlgraph.Session(ir1) as s1:
        losses1 = np.concatenate([step1.run(s1, x[i], t[i]) for i in range(4)])
        after1 = _values(s1, step1)
    assert losses4.shape == (4,)
    np.testing.assert_allclose(losses4, losses1, rtol=1e-6)
    for k in after1:
        np.testing.assert_allclose(after4[k], after1[k], rtol=1e-6, atol=1e-7)


def test_loss_decreases_on_a_classification_problem():
    rng = np.random.default_rng(1)
    centres = rng.normal(size=(3, 4)) * 5
    labels = rng.integers(0, 3, (20, 8)).astype(np.int32)
    x = (centres[labels] + rng.normal(size=(20, 8, 4))).astype(np.float32)
    ir = xlgraph.Ir()
    step = training.build_train_step(
        ir, nn.Linear(4, 3), nn.cross_entropy, optim.SGD(lr=0.01, momentum=0.9),
        inputs=[TensorSpec((8, 4), F32)], targets=[TensorSpec((8,), I32)],
        num_host_transfers=20, init_seed=0)
    with xlgraph.Session(ir, "ipu_model") as session:
        first = step.run(session, x, labels)
        for _ in range(5):
            last = step.run(session, x, labels)
    assert last.mean() < 0.2 * first[0]  # first[0]: the loss before any update
    assert last.mean() < 0.2


def test_forward_given_as_a_graph():
    ir = xlgraph.Ir()
    w0 = np.array([[0.5, -1.0], [2.0, 0.25]], np.float32)

    def affine(x, w):
        return x @ w

    graph = ir.create_graph(affine, TensorSpec((3, 2), F32), TensorSpec((2, 2), F32))
    with ir.main_graph:
        w = xlgraph.variable(w0, name="w")
    step = training.build_train_step(ir, graph, mse, optim.SGD(lr=0.5),
                                     inputs=[TensorSpec((3, 2), F32)],
                                     targets=[TensorSpec((3, 2), F32)],
                                     params={graph.inputs[1]: w})
    x = np.array([[1, 0], [0, 1], [1, 1]], np.float32)
    t = np.zeros((3, 2), np.float32)
    with xlgraph.Session(ir) as session:
        step.run(session, x, t)
        got = session.get_tensor_data(w)
    grad = 2 * x.T @ (x @ w0 - t) / t.size
    np.testing.assert_allclose(got, w0 - 0.5 * grad, rtol=1e-6)
    assert list(step.params) == ["w"]


def test_learning_rate_variable_between_runs():
    x, t = _data(1)
    ir, step = _build(1, optim.SGD(lr=0.1))
    with xlgraph.Session(ir) as session:
        step.optimizer.set_lr(session, 0.0)
        before = _values(session, step)
        step.run(session, x[0], t[0])
        unchanged = _values(session, step)
        step.optimizer.set_lr(session, 0.1)
        step.run(session, x[0], t[0])
        changed = _values(session, step)
    for k in before:
        np.testing.assert_array_equal(unchanged[k], before[k])
    assert any(not np.allclose(changed[k], before[k]) for k in before)


def test_forward_graph_with_a_seed_input():
    ir = xlgraph.Ir()

    def dropped(x, w, seed):
        return ops.dropout(x @ w, seed, 0.5)

    graph = ir.create_graph(dropped, TensorSpec((16, 2), F32), TensorSpec((2, 2), F32),
                            training.SEED_SPEC)
    with ir.main_graph:
        w = xlgraph.variable(np.eye(2, dtype=np.float32), name="w")
    specs = {"inputs": [TensorSpec((16, 2), F32)], "targets": [TensorSpec((16, 2), F32)]}
    with pytest.raises(ValueError, match="seed_input"):
        training.build_train_step(ir, graph, mse, optim.SGD(lr=0.0), params={graph.inputs[1]: w},
                                  seed=1, **specs)
    step = training.build_train_step(ir, graph, mse, optim.SGD(lr=0.0), **specs,
                                     params={graph.inputs[1]: w}, seed=1,
                                     seed_input=graph.inputs[2], num_host_transfers=2)
    x = np.random.default_rng(0).normal(size=(2, 16, 2)).astype(np.float32)
    x[1] = x[0]
    with xlgraph.Session(ir) as session:
        losses = step.run(session, x, np.zeros_like(x))
    assert losses[0] != losses[1]


class DropNet(nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.drop = nn.Dropout(0.5)

    def build(self, x, seed=None):
        return self.fc(self.drop(x, seed))


def test_dropout_masks_change_every_step():
    x, t = _data(2)
    x[1], t[1] = x[0], t[0]  # the same batch twice
    ir = xlgraph.Ir()
    step = training.build_train_step(ir, DropNet(), mse, optim.SGD(lr=0.0),
                                     inputs=[TensorSpec((4, 3), F32)],
                                     targets=[TensorSpec((4, 2), F32)],
                                     num_host_transfers=2, seed=7, init_seed=0)
    with xlgraph.Session(ir) as session:
        losses = step.run(session, x, t)
        again = step.run(session, x, t)
        seed_now = session.get_tensor_data(step.seed)
    assert losses[0] != losses[1]  # lr 0: only the dropout mask differs
    assert not np.array_equal(losses, again)
    assert not np.array_equal(seed_now, xlgraph.create_seeds(7))


def test_inference_step_matches_numpy():
    model = TinyNet()
    ir = xlgraph.Ir()
    infer = training.build_inference(ir, model, [TensorSpec((4, 3), F32)], num_host_transfers=3,
                                     init_seed=5)
    x, _ = _data(3)
    with xlgraph.Session(ir) as session:
        (y,) = infer.run(session, x)
        p = _values(session, infer)
    np.testing.assert_allclose(y, np_tiny(p, x), rtol=1e-5, atol=1e-6)


def test_loss_must_be_a_scalar():
    with pytest.raises(ValueError, match="scalar"):
        training.build_train_step(xlgraph.Ir(), TinyNet(), lambda y, t: y - t, optim.SGD(0.1),
                                  inputs=[TensorSpec((4, 3), F32)],
                                  targets=[TensorSpec((4, 2), F32)])
