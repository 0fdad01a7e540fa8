"""``transforms.grad_of_call`` against the PopXL way (``autodiff`` wired by hand), and the error
for unpacking a call site's declared outputs after autodiff added activations."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph as popxl
import xlgraph.ops as ops
from xlgraph.errors import AutodiffError, GraphMismatchError
from xlgraph.transforms import autodiff, grad_of_call

F32 = popxl.float32
RNG = np.random.default_rng(7)
X = RNG.normal(size=(4, 3)).astype(np.float32)
W = RNG.normal(size=(3, 2)).astype(np.float32)
LABELS = np.array([0, 1, 1, 0], np.int32)


def _loss(x: popxl.Tensor, w: popxl.Tensor, labels: popxl.Tensor) -> popxl.Tensor:
    """A scalar loss over a nested call, so activations cross graph boundaries."""
    inner = popxl.gir().create_graph(lambda a, b: ops.tanh(a @ b), x, w)
    (h,) = ops.call(inner, x, w)
    return ops.nll_loss(ops.log_softmax(h * h, 1), labels, log_prob=True)


def _run(build) -> list[np.ndarray]:
    """Build in a fresh main graph; ``build`` returns tensors to fetch."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X, name="x")
        w = popxl.variable(W, name="w")
        labels = popxl.variable(LABELS, popxl.int32, name="labels")
        fetched = build(ir, x, w, labels)
        streams = []
        for i, t in enumerate(fetched):
            streams.append(popxl.d2h_stream(t.shape, t.dtype, f"out{i}"))
            ops.host_store(streams[-1], t)
    with popxl.Session(ir) as session:
        out = session.run()
    return [out[s] for s in streams]


def _by_hand(ir, x, w, labels):
    graph = ir.create_graph(_loss, x, w, labels)
    site = ops.call_with_info(graph, x, w, labels)
    info = autodiff(graph, grads_required=graph.inputs[:2])
    one = popxl.constant(np.float32(1.0))
    grad_site = ops.call_with_info(info.graph, one, inputs_dict=info.inputs_dict(site))
    grads = info.fwd_parent_ins_to_grad_parent_outs(site, grad_site)
    return [grads[x], grads[w]]


def _helper(ir, x, w, labels):
    graph = ir.create_graph(_loss, x, w, labels)
    site = ops.call_with_info(graph, x, w, labels)
    grads = grad_of_call(site)
    assert list(grads) == [x, w]  # every float input; the int labels get none
    return [grads[x], grads[w]]


def test_grad_of_call_equals_autodiff_wired_by_hand() -> None:
    expected = _run(_by_hand)
    got = _run(_helper)
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    assert np.abs(expected[1]).max() > 1e-3  # a real gradient, not zeros


def test_grad_of_call_matches_finite_differences() -> None:
    def loss_value(w_value):
        logits = np.tanh(X.astype(np.float64) @ w_value) ** 2
        logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
        return -logp[np.arange(4), LABELS].mean()

    (dw,) = _run(lambda ir, x, w, labels: [grad_of_call(ops.call_with_info(
        ir.create_graph(_loss, x, w, labels), x, w, labels), wrt=[w])[w]])
    eps, numeric = 1e-6, np.zeros_like(W, np.float64)
    for idx in np.ndindex(W.shape):
        step = np.zeros_like(W, np.float64)
        step[idx] = eps
        w64 = W.astype(np.float64)
        numeric[idx] = (loss_value(w64 + step) - loss_value(w64 - step)) / (2 * eps)
    np.testing.assert_allclose(dw, numeric, rtol=1e-3, atol=1e-5)


def test_seeds_for_several_outputs_and_a_tensor_passed_twice() -> None:
    def two_outputs(a: popxl.Tensor, b: popxl.Tensor):
        return ops.sin(a * b), ops.exp(a)

    def build(ir, x, w, labels):
        graph = ir.create_graph(two_outputs, x, x)
        site = ops.call_with_info(graph, x, x)
        y0, y1 = site.outputs
        seeds = [popxl.constant(np.full((4, 3), 2.0, np.float32)),
                 popxl.constant(np.full((4, 3), 3.0, np.float32))]
        by_position = grad_of_call(site, seeds=seeds)
        graph2 = ir.create_graph(two_outputs, x, x)
        site2 = ops.call_with_info(graph2, x, x)
        by_name = grad_of_call(site2, seeds={site2.outputs[1]: seeds[1]})
        return [by_position[x], by_name[x]]

    both, only_exp = _run(build)
    x = X.astype(np.float64)
    # x feeds both inputs: d/dx sin(x*x) = 2x cos(x^2), summed over the two uses
    np.testing.assert_allclose(both, 2 * 2 * x * np.cos(x * x) + 3 * np.exp(x), rtol=1e-5)
    np.testing.assert_allclose(only_exp, 3 * np.exp(x), rtol=1e-5)


def test_grad_of_call_explains_bad_arguments() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X, name="x")
        other = popxl.variable(W, name="other")
        graph = ir.create_graph(lambda a: ops.tanh(a), x)
        site = ops.call_with_info(graph, x)
        with pytest.raises(ValueError, match=r"has outputs \(f32\[4,3\]\); pass seeds="):
            grad_of_call(site)
        with pytest.raises(ValueError, match="is not an input of the call"):
            grad_of_call(site, seeds=[x], wrt=[other])
        with pytest.raises(ValueError, match="has 1 outputs, got 2 seeds"):
            grad_of_call(site, seeds=[x, x])
    with graph, pytest.raises(GraphMismatchError, match="build it in graph 'main'"):
        grad_of_call(site, seeds=[x])


def test_unpacking_the_declared_outputs_after_autodiff_names_the_rule() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X, name="x")
        graph = ir.create_graph(lambda a: ops.sin(ops.tanh(a)), x)
        site = ops.call_with_info(graph, x)
        (y,) = site.outputs  # before autodiff: one output
        autodiff(graph)  # sin's gradient reads tanh's output: it becomes an output
        assert len(site.outputs) == 2 and graph.declared_outputs == 1
        with pytest.raises(AutodiffError, match=r"too many values to unpack \(expected 1\): "
                           r"graph .* now has 2 outputs because autodiff added the activations"):
            (y,) = ops.call(graph, x)
        with pytest.raises(ValueError, match="test_grad_of_call.py:"):
            (y,) = site.outputs
        y, activation = site.outputs  # the full count, iteration and indexing still work
        assert [t.name for t in site.outputs] == [y.name, activation.name]
        assert list(ops.call(graph, x))[0].shape == (4, 3)
        with pytest.raises(ValueError, match=r"not enough values to unpack \(expected 3"):
            a, b, c = site.outputs
