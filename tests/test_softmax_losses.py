"""A softmax and its ``nll_loss_with_softmax_grad`` in one loop (``xlgraph.lower.softmax_losses``,
``xlgraph.ops.softmax_loops``): the loop against the two numpy kernels, and programs on
the compiled backend against the interpreter, where the pair applies (in a subgraph too) and
where it does not."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops
from xlgraph.lower.backends import TOLERANCE

pytest.importorskip("numba", reason="needs the fast extra")
F32 = popxl.float32


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_the_loop_matches_softmax_then_the_loss(reduction: str) -> None:
    """GPT-2's 50257 classes and 13 (not a multiple of 16, one run), masked logits (-30000,
    -inf: probability 0), a NaN row (its gradient NaN, and the loss), in place and not."""
    from xlgraph.lower.backends.numba_backend import NumbaBackend
    from xlgraph.ops import nn, softmax_loops

    fn = NumbaBackend().jitted(softmax_loops.softmax_nll)
    rng = np.random.default_rng(3)
    for rows, classes in ((5, 50257), (7, 13)):
        x = (rng.normal(size=(rows, classes)) * 4).astype(np.float32)
        x[1, :3] = -30000
        x[2, -2:] = -np.inf
        labels = rng.integers(3, classes - 2, rows).astype(np.int32)
        labels[0] = classes - 1
        for nan in (False, True):
            x[-1, 4] = np.nan if nan else 0.5
            want_loss, want_grad = nn._nll_softmax(nn._softmax(x, 1), labels, 0.5, None,
                                                   reduction)
            scale, count = softmax_loops.nll_scale(popxl.TensorSpec((rows,), popxl.int32),
                                                        0.5, None, reduction)
            loss, grad = np.empty((), np.float32), np.empty_like(x)
            fn(x, labels, loss, grad, np.float32(scale), np.float32(count))
            np.testing.assert_allclose(grad, want_grad, **TOLERANCE["float32"])
            np.testing.assert_allclose(loss, want_loss, **TOLERANCE["float32"])
            assert np.isnan(loss) == nan and np.isnan(grad[-1]).all() == nan
            assert not np.isnan(grad[:-1]).any()
            assert np.all(grad[1, :3] == 0) and np.all(grad[2, -2:] == 0)
            same = x.copy()
            fn(same, labels, loss, same, np.float32(scale), np.float32(count))
            assert same.tobytes() == grad.tobytes()


def _program(in_subgraph: bool, probs_read: bool, ignore_index: int | None, dtype=F32):
    """``loss, dx = nll_loss_with_softmax_grad(softmax(x @ w), labels)``, in a subgraph or
    not; ``probs_read``: the probabilities are also stored to the host. float16 results are
    doubled before they are stored (an op reads them, as a training step's do)."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        w = popxl.variable(np.random.default_rng(1).normal(size=(24, 40)), dtype, "w")
        xs = popxl.h2d_stream((6, 24), dtype, "x")
        ls = popxl.h2d_stream((6,), popxl.int32, "labels")

        def loss(x, wt, labels):
            probs = ops.softmax(x @ wt, axis=-1)
            value, grad = ops.nll_loss_with_softmax_grad(probs, labels,
                                                          ignore_index=ignore_index)
            if dtype == popxl.float16:
                value, grad = value + value, grad + grad
            return (value, grad, probs) if probs_read else (value, grad)

        args = (ops.host_load(xs), w, ops.host_load(ls))
        if in_subgraph:
            graph = ir.create_graph(loss, popxl.TensorSpec((6, 24), dtype), w.spec,
                                    popxl.TensorSpec((6,), popxl.int32))
            outs = ops.call(graph, *args)
        else:
            outs = loss(*args)
        streams = [popxl.d2h_stream(t.shape, t.dtype, f"out{i}") for i, t in enumerate(outs)]
        for s, t in zip(streams, outs):
            ops.host_store(s, t)
    return ir, xs, ls, streams


@pytest.mark.parametrize(("in_subgraph", "probs_read", "ignore_index", "fused"),
                         [(False, False, None, True), (True, False, None, True),
                          (False, True, None, False), (True, False, 2, False)])
def test_programs_match_the_interpreter(in_subgraph: bool, probs_read: bool,
                                        ignore_index: int | None, fused: bool) -> None:
    """The pair runs as one loop unless the probabilities have another reader or the loss
    ignores a label; the results are the interpreter's either way."""
    rng = np.random.default_rng(2)
    feeds_x = rng.normal(size=(6, 24)).astype(np.float32)
    labels = np.array([0, 39, 2, 2, 17, 5], np.int32)
    got = {}
    for backend in ("numba", "numpy"):
        ir, xs, ls, streams = _program(in_subgraph, probs_read, ignore_index)
        session = popxl.Session(ir, backend=backend, compile_in_background=False)
        if backend == "numba":
            assert ("j_softmax_nll(" in session.source) == fused
            assert ("j_nll_loss_with_softmax_grad(" in session.source) == (
                not fused and ignore_index is None)
        with session:
            out = session.run({xs: feeds_x, ls: labels})
        got[backend] = [out[s] for s in streams]
    assert np.any(got["numpy"][1] < 0)
    for a, b in zip(got["numba"], got["numpy"]):
        np.testing.assert_allclose(a, b, **TOLERANCE["float32"])


@pytest.mark.parametrize("in_subgraph", [False, True])
def test_float16_logits_give_the_bits_of_the_separate_steps(in_subgraph: bool) -> None:
    """float16 logits held in float32 (wide storage): the pair and its three roundings run as
    one loop, with the bits of the steps run apart (the probabilities also read, so the pair
    does not form) and the interpreter's values within a float16 rounding."""
    rng = np.random.default_rng(4)
    feeds_x = (rng.normal(size=(6, 24)) * 0.3).astype(np.float16)
    labels = np.array([0, 39, 2, 2, 17, 5], np.int32)
    got = {}
    for backend, probs_read in (("numba", False), ("numba", True), ("numpy", False)):
        ir, xs, ls, streams = _program(in_subgraph, probs_read, None, popxl.float16)
        session = popxl.Session(ir, backend=backend, compile_in_background=False)
        if backend == "numba":
            assert ("j_softmax_nll_half(" in session.source) == (not probs_read)
            assert ("j_nll_loss_with_softmax_grad(" in session.source) == probs_read
        with session:
            out = session.run({xs: feeds_x, ls: labels})
        got[backend, probs_read] = [out[s] for s in streams[:2]]
    fused, apart, interpreted = got["numba", False], got["numba", True], got["numpy", False]
    assert all(a.dtype == np.float16 for a in fused)
    assert [a.tobytes() for a in fused] == [a.tobytes() for a in apart]
    assert np.isfinite(fused[0]) and np.any(fused[1] < 0) and np.count_nonzero(fused[1]) > 200
    for a, b in zip(fused, interpreted):
        # the exponentials differ in float32's last places, a float16 rounding at most
        np.testing.assert_allclose(a.astype(np.float32), b.astype(np.float32), rtol=1e-3,
                                   atol=1e-6)
