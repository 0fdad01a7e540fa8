"""Attention's ``softmax(scores * c + mask)`` and its scaled gradient in one loop each
(``xlgraph.lower.scaled_softmax``, ``xlgraph.ops.softmax_loops``): the loops against the
compiled steps they replace (bit for bit) and the interpreter, and programs on the compiled
backend against those steps and the interpreter, where the folds apply and where they do not."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops, transforms
from xlgraph.lower.backends import TOLERANCE

pytest.importorskip("numba", reason="needs the fast extra")
F32 = popxl.float32


@pytest.mark.parametrize(("shape", "mask_shape"), [((4, 3, 16, 16), (16, 16)),
                                                   ((2, 3, 5, 13), (1, 3, 5, 13)),
                                                   ((6, 40), (6, 40))])
def test_the_loop_is_the_rows_loop_on_numpys_scores(shape: tuple, mask_shape: tuple) -> None:
    """Masked entries (-1e4 and -inf), a NaN score (its row NaN), rows of 13, 16 and 40."""
    from xlgraph.lower.backends.numba_backend import NumbaBackend
    from xlgraph.ops import nn, softmax_loops

    backend = NumbaBackend()
    fn = backend.jitted(softmax_loops.scaled_masked_softmax32)
    rows = backend.jitted(softmax_loops.softmax_rows32)
    rng = np.random.default_rng(7)
    x = (rng.normal(size=shape) * 8).astype(np.float32)
    x.reshape(-1, shape[-1])[3, 2] = np.nan
    mask = np.triu(np.full(mask_shape, -1e4, np.float32), 1)
    mask.reshape(-1)[-1] = -np.inf
    c = np.array(0.125, np.float32)
    scores = x * c + mask
    want = np.empty_like(x)
    rows(scores, want)
    got = np.empty_like(x)
    fn(x, c, mask, got)
    assert got.tobytes() == want.tobytes()
    assert np.isnan(got.reshape(-1, shape[-1])[3]).all()
    np.testing.assert_allclose(got, nn._softmax(scores, x.ndim - 1), **TOLERANCE["float32"])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_gradient_loop_is_the_gradient_then_the_product(dtype: type) -> None:
    """``softmax_grad`` then ``mul`` by one element, bit for bit: rows of 128 and 13, a NaN
    in ``dy`` (its row NaN), scales 0.125, -3 and infinity (0 * inf is NaN, as numpy's)."""
    from xlgraph.lower.backends.numba_backend import NumbaBackend
    from xlgraph.ops import nn, softmax_loops

    backend = NumbaBackend()
    fn = backend.jitted(softmax_loops.scaled_softmax_grad_rows)
    plain = backend.jitted(softmax_loops.softmax_grad_rows)
    rng = np.random.default_rng(8)
    for shape in ((2, 3, 128), (5, 13)):
        y = nn._softmax(rng.normal(size=shape) * 3, len(shape) - 1).astype(dtype)
        y[0, ..., :2] = 0
        dy = rng.normal(size=shape).astype(dtype)
        dy.reshape(-1)[-1] = np.nan
        grad = np.empty_like(y)
        plain(dy, y, grad)
        np.testing.assert_allclose(grad, nn._softmax_grad(dy, y, len(shape) - 1),
                                   **TOLERANCE[np.dtype(dtype).name])
        for c in (0.125, -3.0, np.inf):
            with np.errstate(invalid="ignore"):
                want = grad * np.array(c, dtype)
            got = np.empty_like(y)
            fn(dy, y, np.array([c], dtype), got)
            assert got.tobytes() == want.tobytes(), c


def _attention(mask_shape: tuple, scores_read: bool):
    """``softmax(q @ k * c + mask) @ v`` in a subgraph and its gradients by autodiff;
    ``scores_read``: the masked scores are also stored to the host."""
    q_shape, mask = (2, 3, 8, 4), np.triu(np.full(mask_shape, -1e4, np.float32), 1)
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        def attend(q, k, v):
            scores = (q @ ops.transpose(k, (0, 1, 3, 2))) * 0.5 + popxl.constant(mask)
            out = ops.softmax(scores, axis=-1) @ v
            return (out, scores) if scores_read else (out,)

        spec = popxl.TensorSpec(q_shape, F32)
        graph = ir.create_graph(attend, spec, spec, spec)
        grad = transforms.autodiff(graph, grads_required=graph.inputs)
        streams = [popxl.h2d_stream(q_shape, F32, name) for name in "qkv"]
        info = ops.call_with_info(graph, *(ops.host_load(s) for s in streams))
        results = info.outputs[:1 + scores_read]  # autodiff added the activations after them
        dys = [popxl.h2d_stream(t.shape, F32, f"d{i}") for i, t in enumerate(results)]
        outs = [*results, *ops.call(grad.graph, *(ops.host_load(d) for d in dys),
                                    inputs_dict=grad.inputs_dict(info))]
        out_streams = [popxl.d2h_stream(t.shape, t.dtype, f"o{i}") for i, t in enumerate(outs)]
        for s, t in zip(out_streams, outs):
            ops.host_store(s, t)
    return ir, [*streams, *dys], out_streams


@pytest.mark.parametrize(("mask_shape", "scores_read", "fused"),
                         [((8, 8), False, True), ((1, 3, 8, 8), False, True),
                          ((8, 8), True, False), ((8, 1), False, False)])
def test_attention_keeps_the_compiled_steps_bits(mask_shape: tuple, scores_read: bool,
                                                 fused: bool,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """One loop unless the masked scores have another reader or the mask repeats along the
    rows, and one for the scaled gradient: the forward and the gradients have the bits of the
    compiled steps (the lowering told to find no fold), the forward the interpreter's to the
    tolerance."""
    from xlgraph.lower import scaled_softmax

    got = {}
    for backend in ("numba", "steps", "numpy"):
        if backend == "steps":
            monkeypatch.setattr(scaled_softmax, "find", lambda *args: {})
        ir, ins, outs = _attention(mask_shape, scores_read)
        session = popxl.Session(ir, backend="numpy" if backend == "numpy" else "numba",
                                compile_in_background=False)
        if backend != "numpy":
            assert ("j_scaled_softmax(" in session.source) == (fused and backend == "numba")
            assert ("j_scaled_softmax_grad(" in session.source) == (  # else the gradient
                backend == "numba" and not scores_read)  # of the stored scores is added first
        rng = np.random.default_rng(4)
        with session:
            result = session.run({s: rng.normal(size=s.shape).astype(np.float32) * 2
                                  for s in ins})
        got[backend] = [result[s] for s in outs]
    assert all(np.any(a != 0) for a in got["numpy"])
    for a, b in zip(got["numba"], got["steps"]):
        assert a.tobytes() == b.tobytes()
    np.testing.assert_allclose(got["numba"][0], got["numpy"][0], **TOLERANCE["float32"])
