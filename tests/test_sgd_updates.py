"""The fused SGD updates (``xlgraph.ops.sgd_updates``) behind ``optim.SGD``: the bits of the
separate ops they replaced on both backends, torch's SGD over several steps, the compiled loops
against the numpy kernel, and no per-run snapshot of the variables they train."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph
from xlgraph import ops, optim
from xlgraph.ops import sgd_updates
from xlgraph.ops.var_updates import copy_var_update_

# every case of the two ops: (momentum, dampening, weight decay, nesterov)
CONFIGS = [
    {},
    {"weight_decay": 0.05},
    {"momentum": 0.9},
    {"momentum": 0.9, "weight_decay": 0.01},
    {"momentum": 0.9, "dampening": 0.3},
    {"momentum": 0.8, "dampening": 0.1, "weight_decay": 0.05},
    {"momentum": 0.9, "nesterov": True},
    {"momentum": 0.7, "nesterov": True, "weight_decay": 0.05},
]
IDS = ["-".join(f"{k}={v}" for k, v in c.items()) or "plain" for c in CONFIGS]
STEPS = 4


class Unfused(optim.SGD):
    """The update written as separate ops, as ``optim.SGD`` wrote it before the fused ops: the
    reference for the bits."""

    def _step_param(self, p, g, slots, lr, step):
        g = self._l2(p, g)
        if self.momentum:
            buf = slots["momentum_buffer"]
            if self.dampening:
                first = ops.cast(ops.equal(step, 1.0), step.dtype)
                coef = first * self.dampening + (1.0 - self.dampening)
                new_buf = buf * self.momentum + g * coef
            else:
                new_buf = buf * self.momentum + g
            copy_var_update_(buf, new_buf)
            g = g + new_buf * self.momentum if self.nesterov else new_buf
        return p - lr * g


def _problem(dtype: type, seed: int = 0) -> tuple[dict, list[dict]]:
    rng = np.random.default_rng(seed)
    shapes = {"w": (37, 211), "b": (5,), "k": (3, 2, 3, 3)}  # odd sizes: no whole vectors
    params = {k: rng.normal(size=s).astype(dtype) for k, s in shapes.items()}
    grads = [{k: rng.normal(size=s).astype(dtype) for k, s in shapes.items()}
             for _ in range(STEPS)]
    return params, grads


def _train(opt: optim.Optimizer, params0: dict, grads_seq: list[dict], backend: str,
           ) -> tuple[list[dict], xlgraph.Session]:
    """Parameters and optimiser state after each step of ``opt`` in a Session."""
    ir = xlgraph.Ir()
    dtype = xlgraph.dtypes.as_dtype(next(iter(params0.values())).dtype)
    with ir.main_graph, xlgraph.in_sequence():
        params = {k: xlgraph.variable(v, dtype, name=k) for k, v in params0.items()}
        streams = {k: xlgraph.h2d_stream(v.shape, dtype, f"grad_{k}")
                   for k, v in params0.items()}
        state = opt.create_state(params)
        opt.update(params, {k: ops.host_load(s) for k, s in streams.items()}, state)
    session = xlgraph.Session(ir, backend=backend, compile_in_background=False)
    history = []
    with session:
        for grads in grads_seq:
            session.run({streams[k]: g for k, g in grads.items()})
            history.append({v.name: session.get_tensor_data(v).copy()
                            for v in [*params.values(), *state.values()]})
    return history, session


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("config", CONFIGS, ids=IDS)
@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_fused_update_has_the_bits_of_the_separate_ops(config: dict, backend: str,
                                                       dtype: type) -> None:
    if backend == "numba":
        pytest.importorskip("numba", reason="needs the fast extra")
    params, grads = _problem(dtype)
    got, session = _train(optim.SGD(lr=0.1, **config), params, grads, backend)
    want, _ = _train(Unfused(lr=0.1, name="sgd", **config), params, grads, "numpy")
    assert not np.allclose(got[-1]["w"], params["w"])
    for step, (g, w) in enumerate(zip(got, want)):
        assert g.keys() == w.keys()
        for k in w:
            np.testing.assert_array_equal(g[k], w[k], err_msg=f"{k} after step {step + 1}")
    source = session.executable.source
    assert "sgd_update_" in source and ("sgd_momentum_" in source) == bool(
        config.get("momentum"))
    if backend == "numba" and dtype == np.float32:  # every update ran as a compiled loop
        assert "o_sgd_" not in source and "j_sgd_update_" in source


@pytest.mark.parametrize("config", CONFIGS, ids=IDS)
def test_matches_torch_sgd_over_several_steps(config: dict) -> None:
    torch = pytest.importorskip("torch")
    params, grads = _problem(np.float32, seed=1)
    got, _ = _train(optim.SGD(lr=0.05, **config), params, grads, "numba")
    tparams = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    topt = torch.optim.SGD(list(tparams.values()), lr=0.05, **config)
    for step, grad in enumerate(grads):
        for k, p in tparams.items():
            p.grad = torch.tensor(grad[k])
        topt.step()
        for k, p in tparams.items():
            np.testing.assert_allclose(got[step][k], p.detach().numpy(), rtol=2e-5, atol=2e-6,
                                       err_msg=f"{k} after step {step + 1}")


def test_trained_variables_need_no_snapshot_per_run() -> None:
    """The updates write the variables' spare arrays (swapped in when the run succeeds), so the
    Session copies none of them before a run; only the step counter of dampening is copied."""
    params, grads = _problem(np.float32)
    _, session = _train(optim.SGD(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1),
                        params, grads[:1], "numpy")
    assert session._backup == []
    _, damped = _train(optim.SGD(lr=0.1, momentum=0.9, dampening=0.5), params, grads[:1],
                       "numpy")
    assert [live.shape for live, _ in damped._backup] == [()]


def _loop_cases() -> list[tuple[str, int]]:
    return [(name, i) for name in ("sgd_momentum_", "sgd_update_")
            for i in range(len(xlgraph.op.REGISTRY[name].samples(np.random.default_rng(0))))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("name", "index"), _loop_cases())
def test_compiled_loops_give_the_numpy_kernels_bits(name: str, index: int, dtype: type) -> None:
    """Each loop form, compiled, against ``kernel_out`` on random inputs: in place and into a
    spare array."""
    numba = pytest.importorskip("numba", reason="needs the fast extra")
    defn = xlgraph.op.REGISTRY[name]
    sample = defn.samples(np.random.default_rng(index))[index]
    rng = np.random.default_rng(100 + index)
    arrays = [None if a is None else np.asarray(a, dtype) for a in sample.args]
    arrays = [a for a in arrays if a is not None]
    arrays = [rng.normal(size=(7, 129)).astype(dtype) if a.ndim else a for a in arrays]
    specs = [xlgraph.TensorSpec(a.shape, xlgraph.dtypes.as_dtype(a.dtype)) for a in arrays]
    fn, extra = defn.loop(specs, **sample.kwargs)
    loop = numba.njit(fn)
    want = defn.kernel_out(*[a.copy() for a in arrays], out=np.empty_like(arrays[0]),
                           scratch=tuple(np.empty_like(arrays[0]) for _ in range(defn.scratch)),
                           **sample.kwargs)
    spare = np.empty_like(arrays[0])
    loop(*arrays, spare, *extra)
    np.testing.assert_array_equal(spare, want)
    inplace = [a.copy() for a in arrays]
    loop(*inplace, inplace[0], *extra)
    np.testing.assert_array_equal(inplace[0], want)


def test_missing_inputs_are_refused() -> None:
    ir = xlgraph.Ir()
    with ir.main_graph:
        v = xlgraph.variable(np.zeros(3, np.float32))
        g = xlgraph.constant(np.ones(3, np.float32))
        with pytest.raises(xlgraph.errors.XlgraphError, match="weight decay"):
            sgd_updates.sgd_momentum_(v, g, weight_decay=0.1)
        with pytest.raises(xlgraph.errors.XlgraphError, match="momentum"):
            sgd_updates.sgd_update_(v, g, 0.1, v)
        with pytest.raises(xlgraph.errors.XlgraphError, match="shape"):
            sgd_updates.sgd_update_(v, xlgraph.constant(np.ones(4, np.float32)), 0.1)
        with pytest.raises(xlgraph.errors.ShapeError, match="the learning rate must have"):
            sgd_updates.sgd_update_(v, g, np.ones(2, np.float32))
        with pytest.raises(xlgraph.errors.ShapeError, match="the step count must have"):
            sgd_updates.sgd_momentum_(v, g, step=np.ones(2, np.float32), dampening=0.5)
