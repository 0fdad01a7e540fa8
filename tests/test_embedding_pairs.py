"""A tied embedding's two gradients in one loop (``xlgraph.lower.embedding_pairs``): the loop
against ``add`` of numpy's ``gather_grad``, and a tied head's backward pass on the compiled
backend against the interpreter, bit for bit."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops, transforms
from xlgraph.ops import indexing

pytestmark = pytest.mark.skipif(importlib.util.find_spec("numba") is None,
                                reason="the compiled loops need numba (xlgraph[fast])")
F32 = popxl.float32


@pytest.mark.parametrize("zero_oor", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gather_grad_add_gives_adds_bits(dtype: type, zero_oor: bool) -> None:
    """Repeated, negative and out-of-range indices; -0.0, infinities and NaN in the table;
    rows of ``dy`` summing to zero; into a separate result and in place."""
    from xlgraph.lower.backends.numba_backend import NumbaBackend
    from xlgraph.ops import embedding_loops

    fn = NumbaBackend().jitted(embedding_loops.gather_grad_add)
    rng = np.random.default_rng(4)
    a = rng.normal(size=(9, 5)).astype(dtype)
    a[0, :2] = -0.0
    a[4] = [np.inf, -np.inf, np.nan, -0.0, 0.0]
    a[6, 1] = a[2, 3] = -0.0  # row 2 is not indexed: a + 0 there
    dy = rng.normal(size=(8, 5)).astype(dtype)
    dy[2] = -dy[1]  # rows 1 and 2 both go to row 6: their sum is +0.0, a's -0.0 becomes +0.0
    dy[3, 0] = -0.0
    idx = np.array([4, 6, 6, -1, 12, -10, 0, 4], np.int32)
    want = a + indexing._gather_grad(dy, idx, a.shape, 0, zero_oor)
    for in_place in (False, True):
        out = a.copy() if in_place else np.empty_like(a)
        rows = np.full_like(a, 7.0)  # the gradient's buffer: whatever it held before
        fn(out if in_place else a, dy, idx, rows, out, int(zero_oor))
        assert out.tobytes() == want.tobytes(), in_place


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gather_grad_add_in_place_over_many_runs(dtype: type) -> None:
    """In place over a table of several scan runs, each holding one of: nothing, -0.0, a quiet
    NaN, a signalling NaN (in the last, partial run): the bits of ``add``."""
    from xlgraph.lower.backends.numba_backend import NumbaBackend
    from xlgraph.ops import embedding_loops

    fn = NumbaBackend().jitted(embedding_loops.gather_grad_add)
    rng = np.random.default_rng(5)
    width = 7
    a = rng.normal(size=(3 * embedding_loops.SCAN_RUN // width + 5, width)).astype(dtype)
    flat = a.reshape(-1)
    flat[embedding_loops.SCAN_RUN + 3] = -0.0  # the second run; the first holds none
    flat[2 * embedding_loops.SCAN_RUN + 9] = np.nan  # the third
    flat[-1] = np.array(0x7FA00000 if dtype == np.float32 else 0x7FF4000000000000,  # the last
                        np.uint32 if dtype == np.float32 else np.uint64).view(dtype)
    dy = rng.normal(size=(6, width)).astype(dtype)
    idx = np.array([0, 2, 2, 5, 900, -3], np.int32)  # not the last row
    with np.errstate(invalid="ignore"):  # the signalling NaN
        want = a + indexing._gather_grad(dy, idx, a.shape, 0, False)
    out = a.copy()
    fn(out, dy, idx, np.zeros_like(a), out, 0)
    assert out.tobytes() == want.tobytes()


def _tied(vocab: int = 40, width: int = 16, tokens: int = 24) -> tuple:
    """``gather(W, ids) @ W.T``, its backward pass from a loaded gradient: the gradient of
    ``W`` is the product's plus ``gather_grad``'s, added."""
    rng = np.random.default_rng(1)
    w0 = rng.normal(size=(vocab, width)).astype(np.float32)
    w0[3, :4] = -0.0
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        w = popxl.variable(w0, F32, "W")
        ids_s = popxl.h2d_stream((tokens,), popxl.int32, "ids")
        dy_s = popxl.h2d_stream((tokens, vocab), F32, "dy")
        fwd = ir.create_graph(lambda t, i: ops.gather(t, i) @ ops.transpose(t), w.spec,
                              popxl.TensorSpec((tokens,), popxl.int32))
        grad = transforms.autodiff(fwd)
        info = ops.call_with_info(fwd, w, ops.host_load(ids_s))
        (dw,) = ops.call(grad.graph, ops.host_load(dy_s),
                         inputs_dict=grad.inputs_dict(info))[:1]
        out = popxl.d2h_stream(dw.shape, F32, "dW")
        ops.host_store(out, dw)
    ids = rng.integers(0, vocab, (tokens,)).astype(np.int32)
    ids[:4] = [5, 5, 7, 5]
    feeds = {ids_s: ids, dy_s: rng.normal(size=(tokens, vocab)).astype(np.float32)}
    return ir, feeds, out


def test_a_tied_heads_gradient_matches_the_interpreter() -> None:
    ir, feeds, out = _tied()
    want = popxl.Session(ir, optimize=False)
    with want:
        expected = want.run(feeds)[out]
    session = popxl.Session(ir, backend="numba", compile_in_background=False)
    assert "j_gather_grad_add(" in session.source
    with session:
        got = session.run(feeds)[out]
    assert got.tobytes() == expected.tobytes()
