"""xlgraph.optim against a numpy re-implementation, and against torch.optim when installed."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph
from xlgraph import ops, optim

STEPS = 5

# (optimiser, keyword arguments): the same names as torch.optim's.
CONFIGS = [
    ("SGD", {"lr": 0.1}),
    ("SGD", {"lr": 0.1, "momentum": 0.9}),
    ("SGD", {"lr": 0.05, "momentum": 0.9, "dampening": 0.3, "weight_decay": 0.1}),
    ("SGD", {"lr": 0.05, "momentum": 0.8, "nesterov": True, "weight_decay": 0.05}),
    ("Adam", {"lr": 0.01}),
    ("Adam", {"lr": 0.02, "betas": (0.8, 0.9), "eps": 1e-6, "weight_decay": 0.1}),
    ("AdamW", {"lr": 0.01}),
    ("AdamW", {"lr": 0.02, "betas": (0.85, 0.95), "weight_decay": 0.3}),
    ("RMSprop", {"lr": 0.01}),
    ("RMSprop", {"lr": 0.01, "alpha": 0.9, "momentum": 0.5, "centered": True,
                 "weight_decay": 0.1}),
    ("LAMB", {"lr": 0.02}),
    ("LAMB", {"lr": 0.02, "betas": (0.8, 0.9), "weight_decay": 0.1, "max_weight_norm": 0.7}),
]
TORCH_NAMES = {"SGD", "Adam", "AdamW", "RMSprop"}


def _problem(seed: int = 0) -> tuple[dict[str, np.ndarray], list[dict[str, np.ndarray]]]:
    rng = np.random.default_rng(seed)
    params = {"w": rng.normal(size=(3, 4)).astype(np.float32),
              "b": rng.normal(size=(4,)).astype(np.float32),
              "z": np.zeros((2,), np.float32)}  # a zero tensor: LAMB's trust ratio falls back to 1
    grads = [{k: rng.normal(size=v.shape).astype(np.float32) for k, v in params.items()}
             for _ in range(STEPS)]
    return params, grads


def run_xlgraph(opt: optim.Optimizer, params0, grads_seq, lr_after: dict[int, float] | None = None):
    """Apply ``opt`` in a Session for each step's gradients; returns params after every step."""
    ir = xlgraph.Ir()
    with ir.main_graph, xlgraph.in_sequence():
        params = {k: xlgraph.variable(v, name=k) for k, v in params0.items()}
        streams = {k: xlgraph.h2d_stream(v.shape, xlgraph.float32, f"grad_{k}")
                   for k, v in params0.items()}
        state = opt.create_state(params)
        opt.update(params, {k: ops.host_load(s) for k, s in streams.items()}, state)
    history = []
    with xlgraph.Session(ir) as session:
        for i, grads in enumerate(grads_seq):
            if lr_after and i in lr_after:
                opt.set_lr(session, lr_after[i])
            session.run({streams[k]: g for k, g in grads.items()})
            history.append({k: session.get_tensor_data(v) for k, v in params.items()})
    return history


# -- the numpy re-implementation (float64) ------------------------------------------------------
def _sgd(p, g, s, t, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
    g = g + weight_decay * p
    if momentum:
        s["buf"] = g.copy() if t == 1 else momentum * s["buf"] + (1 - dampening) * g
        g = g + momentum * s["buf"] if nesterov else s["buf"]
    return p - lr * g


def _adam_moments(g, s, beta1, beta2):
    s["m"] = beta1 * s.get("m", 0.0) + (1 - beta1) * g
    s["v"] = beta2 * s.get("v", 0.0) + (1 - beta2) * g * g
    return s["m"], s["v"]


def _adam(p, g, s, t, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False):
    if decoupled:
        p = p * (1 - lr * weight_decay)
    else:
        g = g + weight_decay * p
    m, v = _adam_moments(g, s, *betas)
    m_hat = m / (1 - betas[0] ** t)
    v_hat = v / (1 - betas[1] ** t)
    return p - lr * m_hat / (np.sqrt(v_hat) + eps)


def _adamw(p, g, s, t, lr, weight_decay=1e-2, **kw):
    return _adam(p, g, s, t, lr, weight_decay=weight_decay, decoupled=True, **kw)


def _rmsprop(p, g, s, t, lr, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
             centered=False):
    g = g + weight_decay * p
    s["sq"] = alpha * s.get("sq", 0.0) + (1 - alpha) * g * g
    avg = s["sq"]
    if centered:
        s["ga"] = alpha * s.get("ga", 0.0) + (1 - alpha) * g
        avg = avg - s["ga"] ** 2
    step = g / (np.sqrt(avg) + eps)
    if momentum:
        s["buf"] = momentum * s.get("buf", 0.0) + step
        step = s["buf"]
    return p - lr * step


def _lamb(p, g, s, t, lr, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0,
          max_weight_norm=None):
    m, v = _adam_moments(g, s, *betas)
    u = (m / (1 - betas[0] ** t)) / (np.sqrt(v / (1 - betas[1] ** t)) + eps) + weight_decay * p
    r1 = np.linalg.norm(p)
    if max_weight_norm is not None:
        r1 = min(r1, max_weight_norm)
    r2 = np.linalg.norm(u)
    trust = r1 / r2 if r1 > 0 and r2 > 0 else 1.0
    return p - lr * trust * u


REFERENCE = {"SGD": _sgd, "Adam": _adam, "AdamW": _adamw, "RMSprop": _rmsprop, "LAMB": _lamb}


def run_reference(name: str, kwargs: dict, params0, grads_seq):
    params = {k: v.astype(np.float64) for k, v in params0.items()}
    states: dict[str, dict] = {k: {} for k in params}
    history = []
    for t, grads in enumerate(grads_seq, start=1):
        params = {k: REFERENCE[name](p, grads[k].astype(np.float64), states[k], t, **kwargs)
                  for k, p in params.items()}
        history.append(params)
    return history


def _assert_histories(got, want):
    for step, (g, w) in enumerate(zip(got, want)):
        for k in w:
            np.testing.assert_allclose(g[k], w[k], rtol=2e-5, atol=2e-6,
                                       err_msg=f"parameter {k} after step {step + 1}")


@pytest.mark.parametrize("name,kwargs", CONFIGS, ids=[f"{n}-{i}" for i, (n, _) in
                                                      enumerate(CONFIGS)])
def test_matches_numpy_reference(name, kwargs):
    params, grads = _problem()
    got = run_xlgraph(getattr(optim, name)(**kwargs), params, grads)
    want = run_reference(name, kwargs, params, grads)
    assert not np.allclose(want[-1]["w"], params["w"])  # the updates did something
    _assert_histories(got, want)


@pytest.mark.parametrize("name,kwargs", [c for c in CONFIGS if c[0] in TORCH_NAMES],
                         ids=[f"{n}-{i}" for i, (n, _) in enumerate(CONFIGS) if n in TORCH_NAMES])
def test_matches_torch(name, kwargs):
    torch = pytest.importorskip("torch")
    params, grads = _problem(1)
    got = run_xlgraph(getattr(optim, name)(**kwargs), params, grads)
    tparams = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    topt = getattr(torch.optim, name)(list(tparams.values()), **kwargs)
    want = []
    for step in grads:
        for k, p in tparams.items():
            p.grad = torch.tensor(step[k])
        topt.step()
        want.append({k: p.detach().numpy().copy() for k, p in tparams.items()})
    _assert_histories(got, want)


def test_learning_rate_changes_without_rebuilding():
    params, grads = _problem()
    got = run_xlgraph(optim.SGD(lr=0.1), params, grads[:3], lr_after={1: 0.0, 2: 0.5})
    np.testing.assert_allclose(got[1]["w"], got[0]["w"])  # lr 0: no change
    np.testing.assert_allclose(got[2]["w"], got[1]["w"] - 0.5 * grads[2]["w"], rtol=1e-6)


def test_state_variables_are_named_by_parameter():
    ir = xlgraph.Ir()
    with ir.main_graph:
        params = {"fc.weight": xlgraph.variable(np.zeros((2, 3), np.float32), name="fc.weight")}
        state = optim.Adam(name="opt").create_state(params)
    assert sorted(state) == ["opt.exp_avg.fc.weight", "opt.exp_avg_sq.fc.weight", "opt.lr",
                             "opt.step"]
    assert all(v.name == k for k, v in state.items())
    assert state["opt.exp_avg.fc.weight"].shape == (2, 3)


def test_invalid_arguments():
    with pytest.raises(ValueError, match="Nesterov"):
        optim.SGD(lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="lr"):
        optim.Adam(lr=-1.0)
    with pytest.raises(RuntimeError, match="create_state"):
        optim.SGD(lr=0.1).set_lr(None, 0.2)
