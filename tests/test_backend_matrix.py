"""One program over every way of running it: replicas on/off x numba on/off x check_numerics
on/off. Results agree (within the numba backend's documented tolerance: its ``exp`` and row
sums may differ in the last bit, and the replicated plan sums weight gradients over the replicas
in one product) and every error that each mode raises has one text: label range checks, stream
checks and the floating-point traps of ``enableFloatingPointChecks``.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops
from xlgraph.errors import ExecutionError, StreamInputError
from xlgraph.lower.backends import TOLERANCE
from xlgraph.ops.collectives import replicated_all_reduce
from xlgraph.transforms import grad_of_call

pytest.importorskip("numba", reason="needs the fast extra")

MODES = list(itertools.product((1, 2), ("numpy", "numba"), (False, True)))
BATCH, FEATURES, CLASSES = 4, 6, 5


def _forward(x, w0, w1):
    return ops.gelu(x @ w0) @ w1


def _session(replicas: int, backend: str, numerics: bool, traps: bool = False):
    """A training step: loss and gradients of softmax-NLL, all-reduced over the replicas."""
    ir = popxl.Ir(replication=replicas)
    ir.session_options.enableFloatingPointChecks = traps
    rng = np.random.default_rng(0)
    with ir.main_graph, popxl.in_sequence():
        w0 = popxl.variable(rng.normal(0, 0.5, (FEATURES, 8)).astype(np.float32), name="w0")
        w1 = popxl.variable(rng.normal(0, 0.5, (8, CLASSES)).astype(np.float32), name="w1")
        s_x = popxl.h2d_stream((BATCH, FEATURES), popxl.float32, "x")
        s_y = popxl.h2d_stream((BATCH,), popxl.int32, "labels")
        s_loss = popxl.d2h_stream((), popxl.float32, "loss")
        net = ir.create_graph(_forward, s_x.spec, w0.spec, w1.spec)
        site = ops.call_with_info(net, ops.host_load(s_x), w0, w1)
        probs = ops.softmax(site.outputs[0], axis=-1)
        loss, d_logits = ops.nll_loss_with_softmax_grad(probs, ops.host_load(s_y))
        grads = grad_of_call(site, seeds=[d_logits], wrt=[w0, w1])
        for w in (w0, w1):
            g = replicated_all_reduce(grads[w], "mean") if replicas > 1 else grads[w]
            ops.scaled_add_(w, g, b=-0.5)
        ops.host_store(s_loss, replicated_all_reduce(loss, "mean") if replicas > 1 else loss)
    session = popxl.Session(ir, backend=backend, check_numerics=numerics,
                            compile_in_background=False)
    return session, s_x, s_y, s_loss, (w0, w1)


def _data(replicas: int, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The same batch on every replica, so that every mode computes the same step."""
    if replicas == 1:
        return x, y
    return np.stack([x] * replicas), np.stack([y] * replicas)


def _batch(seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(BATCH, FEATURES)).astype(np.float32),
            rng.integers(0, CLASSES, BATCH).astype(np.int32))


def _train(mode: tuple[int, str, bool]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    replicas = mode[0]
    session, s_x, s_y, s_loss, weights = _session(*mode)
    losses = []
    with session:
        for step in range(3):
            x, y = _data(replicas, *_batch(step))
            losses.append(session.run({s_x: x, s_y: y})[s_loss])
    return losses, [session.get_tensor_data(w) for w in weights]


def test_every_mode_trains_alike() -> None:
    ref_losses, ref_weights = _train(MODES[0])
    for mode in MODES[1:]:
        losses, weights = _train(mode)
        for got, want in zip([*losses, *weights], [*ref_losses, *ref_weights]):
            if mode[0] > 1 and got.ndim > want.ndim:
                got, want = got, np.stack([want] * mode[0])
            np.testing.assert_allclose(got, want, **TOLERANCE["float32"], err_msg=str(mode))


def _error(mode: tuple[int, str, bool], x: np.ndarray, y: np.ndarray,
           traps: bool = False) -> str:
    """The text of the error a run of ``mode`` raises; the weights must be unchanged."""
    session, s_x, s_y, _, weights = _session(*mode, traps=traps)
    before = [session.get_tensor_data(w) for w in weights]
    with session, pytest.raises((ExecutionError, StreamInputError)) as info:
        session.run({s_x: x, s_y: y})
    for w, value in zip(weights, before):
        np.testing.assert_array_equal(session.get_tensor_data(w), value)
    return f"{type(info.value).__name__}: {info.value}"


@pytest.mark.parametrize("case", ["label", "trap", "stream"])
def test_every_mode_raises_the_same_error(case: str) -> None:
    x, y = _batch()
    traps = case == "trap"
    if case == "label":
        y[2] = CLASSES + 2
    elif case == "trap":
        x[1, 3] = 1e30  # overflows float32 in the first product's gelu
    texts = {}
    for mode in MODES:
        xs, ys = _data(mode[0], x, y)
        if case == "stream":
            xs = xs[..., :-1]
        texts[mode] = _error(mode, xs, ys, traps).replace(
            "(num_host_transfers=1, replicas=2)", "(num_host_transfers=1, replicas=1)").replace(
            f"host data of shape {(2, BATCH, FEATURES)}", f"host data of shape {(BATCH, FEATURES)}"
        ).replace(f"got {(2, BATCH, FEATURES - 1)}", f"got {(BATCH, FEATURES - 1)}")
    reference = texts[MODES[0]]
    expected = {"label": "label 7 is out of range for 5 classes", "trap": "FloatingPointError",
                "stream": "StreamInputError"}[case]
    assert expected in reference
    for mode, text in texts.items():
        assert text == reference, mode


def test_numba_keeps_to_numpy_kernels_under_floating_point_checks() -> None:
    """Compiled loops report no IEEE flags, so with the traps on the plan runs numpy's kernels
    (which trap, as above); without them it calls the loops."""
    for replicas in (1, 2):
        assert "j_gelu" in _session(replicas, "numba", False)[0].source
        assert "j_" not in _session(replicas, "numba", False, traps=True)[0].source
