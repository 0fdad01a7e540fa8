"""Replicated steps rewritten as one-replica ops on a longer batch (``lower.replica_folds``) and
loop forms run once per replica in compiled segments: the replicated step computes what the
one-replica step computes for the whole batch, bit for bit, on both backends, fused or not."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import xlgraph
from xlgraph import ops
from xlgraph.lower.replicas import loops_over_replicas
from xlgraph.ops.collectives import replicated_all_reduce
from xlgraph.transforms import grad_of_call

BACKENDS = ["numpy", pytest.param("numba", marks=pytest.mark.skipif(
    importlib.util.find_spec("numba") is None, reason="needs numba"))]


def _mlp(x, labels, w0, w1):
    return ops.nll_loss(ops.softmax(ops.gelu(x @ w0) @ w1, axis=-1), labels)


def _cnn(x, labels, k, w):
    h = ops.max_pool(ops.relu(ops.conv(x, k, padding=(1, 1, 1, 1))), (2, 2), (2, 2))
    return ops.nll_loss(ops.softmax(h.reshape((x.shape[0], -1)) @ w, axis=-1), labels)


MODELS = {"mlp": (_mlp, (12,), [(12, 16), (16, 5)]),
          "cnn": (_cnn, (1, 6, 6), [(3, 1, 3, 3), (3 * 3 * 3, 5)])}


def _train(model: str, replicas: int, batch: int, backend: str, op: str = "mean",
           fuse: bool = True, steps: int = 2) -> tuple[list[np.ndarray], xlgraph.Session]:
    """SGD steps of ``model`` whose gradients are all-reduced with ``op``; every replica
    gets its own slice of one global batch of ``replicas * batch`` items."""
    fn, item, shapes = MODELS[model]
    ir = xlgraph.Ir(replication=replicas)
    init = np.random.default_rng(0)
    with ir.main_graph, xlgraph.in_sequence():
        streams = (xlgraph.h2d_stream((batch, *item), xlgraph.float32, "x"),
                   xlgraph.h2d_stream((batch,), xlgraph.int32, "y"))
        weights = [xlgraph.variable(init.normal(0, 0.3, s).astype(np.float32)) for s in shapes]
        graph = ir.create_graph(fn, *(t.spec for t in (*streams, *weights)))
        site = ops.call_with_info(graph, *map(ops.host_load, streams), *weights)
        for w, g in grad_of_call(site, wrt=weights).items():
            ops.scaled_add_(w, replicated_all_reduce(g, op) if replicas > 1 else g, b=-0.25)
    session = xlgraph.Session(ir, backend=backend, compile_in_background=False,
                              fuse_steps=fuse)
    data = np.random.default_rng(1)
    with session:
        for _ in range(steps):
            x = data.normal(size=(replicas * batch, *item)).astype(np.float32)
            y = data.integers(0, 5, replicas * batch).astype(np.int32)
            lead = (replicas, batch) if replicas > 1 else (batch,)
            session.run(dict(zip(streams, (x.reshape(*lead, *item), y.reshape(lead)))))
        return [session.get_tensor_data(w) for w in weights], session


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_replicas_compute_the_one_replica_step_of_the_whole_batch(backend, model, replicas=4):
    """A mean over a power-of-two count of replicas: the weight gradients contract the
    replica axis with the batch in one product (its mean scales the smaller operand, exactly),
    so the weights equal those of one replica on the whole batch bit for bit."""
    got, session = _train(model, replicas, 3, backend)
    want, _ = _train(model, 1, 3 * replicas, backend)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert loops_over_replicas(session.executable.program) == []
    source = session.executable.source
    if model == "cnn":  # one convolution of the 12 items, a reshape view of the replicas'
        assert "shape=(12, 1, 6, 6))" in source
        assert f"{'j' if backend == 'numba' else 'o'}_conv(s" in source  # the loop if any


@pytest.mark.parametrize(("model", "replicas", "op"),
                         [("mlp", 4, "mean"), ("cnn", 3, "mean"), ("mlp", 2, "add")])
def test_segments_over_replicas_equal_the_unfused_step(model, replicas, op):
    """The numba step with segments (loop forms once per replica inside them) against the
    same step without segments; a mean over 3 replicas divides the summed product, a sum
    keeps it."""
    pytest.importorskip("numba")
    fused, session = _train(model, replicas, 2, "numba", op)
    unfused, _ = _train(model, replicas, 2, "numba", op, fuse=False)
    for f, u in zip(fused, unfused):
        np.testing.assert_array_equal(f, u)
    source = session.executable.source
    assert f"#     for r in range({replicas}): j_nll_loss_grad(" in source  # in a segment
    assert "k_nll_loss_grad" not in source and "k_matmul" not in source
    body = source.split("    return None")[0]  # the summed product is the sum: no step
    assert ("k_replicated_all_reduce" in body) == (op == "mean" and replicas == 3)



def test_ops_with_per_replica_scalars_keep_their_replicated_form_beside_a_segment():
    """A loop form is not run per replica where it would get one replica of a 0-d value (a
    scalar in a segment, which would not compile): the NLL's per-replica loss keeps its
    replicated form, and the product and softmax before it still fuse."""
    pytest.importorskip("numba")
    ir = xlgraph.Ir(replication=2)
    weight = np.linspace(-1, 1, 20, dtype=np.float32).reshape(4, 5)
    with ir.main_graph, xlgraph.in_sequence():
        w = xlgraph.variable(weight)
        s_x = xlgraph.h2d_stream((3, 4), xlgraph.float32, "x")
        s_y = xlgraph.h2d_stream((3,), xlgraph.int32, "y")
        s_loss = xlgraph.d2h_stream((), xlgraph.float32, "loss")
        probs = ops.softmax(ops.host_load(s_x) @ w, axis=-1)
        loss, _ = ops.nll_loss_with_softmax_grad(probs, ops.host_load(s_y))
        ops.host_store(s_loss, loss)
    x = np.random.default_rng(2).normal(size=(2, 3, 4)).astype(np.float32)
    y = np.array([[0, 1, 4], [2, 3, 3]], np.int32)
    with xlgraph.Session(ir, backend="numba", compile_in_background=False) as session:
        got = session.run({s_x: x, s_y: y})[s_loss]
        source = session.executable.source
    assert "g0(" in source and "k_nll_loss_with_softmax_grad(" in source
    for r in range(2):
        logits = (x[r] @ weight).astype(np.float64)
        probs_r = np.exp(logits - logits.max(-1, keepdims=True))
        probs_r /= probs_r.sum(-1, keepdims=True)
        want = -np.log(probs_r[np.arange(3), y[r]]).mean()
        np.testing.assert_allclose(got[r], want, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_interpreter_reduces_per_replica_products_as_written(backend, replicas=4):
    """docs/replicas.md: the compiled program contracts a mean all-reduce of per-replica
    products into one product over the whole batch, while ``optimize=False`` multiplies per
    replica and then averages, so the two differ in the last bits (issue 43, R17)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(replicas, 6, 10)).astype(np.float32)
    y = rng.normal(size=(replicas, 6, 12)).astype(np.float32)

    def run(optimize: bool, n: int, reduce: bool) -> np.ndarray:
        ir = xlgraph.Ir(replication=n)
        with ir.main_graph:
            xs = xlgraph.h2d_stream((6 * replicas // n, 10), xlgraph.float32, "x")
            ys = xlgraph.h2d_stream((6 * replicas // n, 12), xlgraph.float32, "y")
            p = ops.matmul(ops.transpose(ops.host_load(xs)), ops.host_load(ys))
            p = replicated_all_reduce(p, "mean") if reduce else p
            out = xlgraph.d2h_stream(p.shape, xlgraph.float32, "out")
            ops.host_store(out, p)
        with xlgraph.Session(ir, optimize=optimize, backend=backend) as session:
            return session.run({xs: x.reshape(n, -1, 10).squeeze(0) if n == 1 else x,
                                ys: y.reshape(n, -1, 12).squeeze(0) if n == 1 else y})[out]

    compiled, interpreted = run(True, replicas, True), run(False, replicas, True)
    whole_batch = run(True, 1, False)  # one replica, batch 4 * 6
    per_replica = np.stack([a.T @ b for a, b in zip(x, y)])
    for r in range(replicas):
        np.testing.assert_array_equal(compiled[r], whole_batch / np.float32(replicas))
        np.testing.assert_array_equal(interpreted[r], per_replica.sum(0) / np.float32(replicas))
    np.testing.assert_allclose(compiled, interpreted, rtol=1e-5, atol=1e-6)
    assert (compiled != interpreted).sum() > 0  # another order of summation: not the same bits
