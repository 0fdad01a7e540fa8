"""The compiled loops of ``log_softmax``, ``nll_loss`` and their gradients
(``xlgraph.ops.loss_loops``): PopTorch's classification loss and its backward through the numba
backend against numpy, ignored labels, and out-of-range labels failing the run as numpy does."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops
from xlgraph.errors import ExecutionError
from xlgraph.lower.backends import TOLERANCE
from xlgraph.transforms import autodiff

pytest.importorskip("numba", reason="needs the fast extra")

SHAPE = (16, 10)


def _loss_step(ignore_index: int | None, reduction: str, log_prob: bool, backend: str):
    """``nll_loss(log_softmax(x))`` (or of softmax probabilities) and its gradient."""
    ir = popxl.Ir()
    with ir.main_graph:
        def loss(x, labels):
            probs = ops.log_softmax(x, 1) if log_prob else ops.softmax(x, 1)
            return ops.nll_loss(probs, labels, ignore_index=ignore_index, reduction=reduction,
                                log_prob=log_prob)

        graph = ir.create_graph(loss, popxl.TensorSpec(SHAPE, popxl.float32),
                                popxl.TensorSpec(SHAPE[:1], popxl.int32))
        info = autodiff(graph, grads_required=[graph.inputs[0]])
        xs = popxl.h2d_stream(SHAPE, popxl.float32, "x")
        ls = popxl.h2d_stream(SHAPE[:1], popxl.int32, "labels")
        x, lab = ops.host_load(xs), ops.host_load(ls)
        site = ops.call_with_info(graph, x, lab)
        (dx,) = ops.call(info.graph, popxl.constant(np.float32(0.7)),
                         inputs_dict=info.inputs_dict(site))
        out = {"loss": site.outputs[0], "dx": dx}
        streams = {k: popxl.d2h_stream(t.shape, t.dtype, k) for k, t in out.items()}
        for k, t in out.items():
            ops.host_store(streams[k], t)
    session = popxl.Session(ir, backend=backend, compile_in_background=False)
    return session, xs, ls, streams


@pytest.mark.parametrize("log_prob", [True, False])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("ignore_index", [None, -100, 3])
def test_loss_and_gradient_match_numpy(ignore_index: int | None, reduction: str,
                                       log_prob: bool) -> None:
    rng = np.random.default_rng(0)
    x = (rng.normal(size=SHAPE) * 3).astype(np.float32)
    labels = rng.integers(0, SHAPE[1], SHAPE[0]).astype(np.int32)
    labels[::4] = -100 if ignore_index == -100 else labels[::4]
    results = {}
    for backend in ("numba", "numpy"):
        session, xs, ls, streams = _loss_step(ignore_index, reduction, log_prob, backend)
        with session:
            got = session.run({xs: x, ls: labels})
        results[backend] = {k: got[s] for k, s in streams.items()}
        if backend == "numba" and log_prob:
            for name in ("log_softmax", "nll_loss", "nll_loss_grad", "log_softmax_grad"):
                assert f"j_{name}(" in session.source, name  # a compiled loop (maybe in a segment)
    for k in ("loss", "dx"):
        np.testing.assert_allclose(results["numba"][k], results["numpy"][k],
                                   **TOLERANCE["float32"], err_msg=k)
    assert np.any(results["numpy"]["dx"] != 0)


def test_every_label_ignored_gives_a_zero_mean_and_gradient() -> None:
    session, xs, ls, streams = _loss_step(-100, "mean", True, "numba")
    with session:
        got = session.run({xs: np.ones(SHAPE, np.float32),
                           ls: np.full(SHAPE[:1], -100, np.int32)})
    assert got[streams["loss"]] == 0 and not np.any(got[streams["dx"]])


@pytest.mark.parametrize("bad", [10, -1])
def test_an_out_of_range_label_fails_the_run_as_numpy_does(bad: int) -> None:
    labels = np.zeros(SHAPE[:1], np.int32)
    labels[5] = bad
    messages = []
    for backend in ("numba", "numpy"):
        session, xs, ls, _ = _loss_step(-100, "mean", True, backend)
        with session, pytest.raises(ExecutionError, match="nll_loss") as info:
            session.run({xs: np.ones(SHAPE, np.float32), ls: labels})
        messages.append(str(info.value))
    assert f"label {bad} is out of range for 10 classes" in messages[0]
    assert "ignore_index=-100" in messages[0]
    assert messages[0].split("IndexError: ")[1] == messages[1].split("IndexError: ")[1]
