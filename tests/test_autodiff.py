"""The autodiff contract: defaults, ordering, subsets, activations, nested calls, refusals."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import errors, ops
from xlgraph.transforms import ExpectedConnectionType, GradGraphInfo, autodiff

FWD, FWD_GRAD = ExpectedConnectionType.Fwd, ExpectedConnectionType.FwdGrad
RNG = np.random.default_rng(7)


def mlp(x, w, b):
    return ops.tanh(x @ w + b), ops.sum(x * x)


def _setup(ir: popxl.Ir):
    with ir.main_graph:
        x = popxl.variable(RNG.normal(size=(4, 3)), popxl.float64, name="x")
        w = popxl.variable(RNG.normal(size=(3, 2)), popxl.float64, name="w")
        b = popxl.variable(RNG.normal(size=(2,)), popxl.float64, name="b")
        graph = ir.create_graph(mlp, x.spec, w.spec, b.spec)
    return graph, x, w, b


def test_defaults_and_ordering() -> None:
    ir = popxl.Ir()
    graph, *_ = _setup(ir)
    info = autodiff(graph)
    assert isinstance(info, GradGraphInfo) and info.forward_graph is graph
    seeds = info.expected_inputs[:2]
    assert [c.fwd_tensor for c in seeds] == list(graph.outputs[:2])
    assert all(c.connection_type is FWD_GRAD for c in seeds)
    assert all(c.connection_type is FWD for c in info.expected_inputs[2:])
    assert [c.fwd_tensor for c in info.expected_outputs] == list(graph.inputs)
    assert all(c.connection_type is FWD_GRAD for c in info.expected_outputs)
    assert len(info.graph.inputs) == len(info.expected_inputs)
    assert len(info.graph.outputs) == len(info.expected_outputs)
    assert "GradGraphInfo[" in repr(info)


def test_subsets_follow_the_requested_order() -> None:
    ir = popxl.Ir()
    graph, *_ = _setup(ir)
    x, w, b = graph.inputs
    info = autodiff(graph, grads_provided=graph.outputs[:1], grads_required=[b, w])
    assert [c.fwd_tensor for c in info.expected_outputs] == [b, w]
    assert info.expected_inputs[0].fwd_tensor is graph.outputs[0]
    assert all(c.connection_type is FWD for c in info.expected_inputs[1:])


def test_activations_become_forward_outputs_and_call_sites_gain_them() -> None:
    def fn(x):
        return ops.sum(ops.exp(x) * ops.log(x))

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.array([0.5, 2.0]), popxl.float64, name="x")
        graph = ir.create_graph(fn, x.spec)
        site = ops.call_with_info(graph, x)
        assert len(site.outputs) == 1
        info = autodiff(graph)
    internal = [c.fwd_tensor for c in info.expected_inputs
                if c.connection_type is FWD and c.fwd_tensor not in graph.inputs]
    assert internal and all(t in graph.outputs for t in internal)
    assert len(site.outputs) == len(graph.outputs) > 1
    with ir.main_graph:
        seed = popxl.constant(1.0, popxl.float64)
        (dx,) = ops.call(info.graph, seed, inputs_dict=info.inputs_dict(site))
        out = popxl.d2h_stream(dx.shape, dx.dtype, "dx")
        ops.host_store(out, dx)
    with popxl.Session(ir) as session:
        got = session.run()[out]
    xv = np.array([0.5, 2.0])
    np.testing.assert_allclose(got, np.exp(xv) * np.log(xv) + np.exp(xv) / xv)


def _numeric_grad(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


@pytest.mark.parametrize("optimize", [True, False])
def test_nested_calls_are_differentiated_recursively(optimize: bool) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(RNG.normal(size=(3,)), popxl.float64, name="x")
        w = popxl.variable(RNG.normal(size=(3,)), popxl.float64, name="w")
        inner = ir.create_graph(lambda a, b: ops.tanh(a * b), x.spec, w.spec)

        def outer(a, b):
            (h,) = ops.call(inner, a, b)
            (h2,) = ops.call(inner, h, b)
            return ops.sum(h2 * h2)

        graph = ir.create_graph(outer, x.spec, w.spec)
        site = ops.call_with_info(graph, x, w)
        infos = autodiff(graph, return_all_grad_graphs=True)
        assert set(infos) == {graph, inner}
        info = infos[graph]
        seed = popxl.constant(1.0, popxl.float64)
        grad_site = ops.call_with_info(info.graph, seed, inputs_dict=info.inputs_dict(site))
        grads = info.fwd_parent_ins_to_grad_parent_outs(site, grad_site)
        streams = {}
        for t in (x, w):
            streams[t] = popxl.d2h_stream(t.shape, t.dtype, f"d{t.name}")
            ops.host_store(streams[t], grads[t])
    session = popxl.Session(ir, optimize=optimize)
    with session:
        got = session.run()
    xv, wv = session.get_tensor_data(x), session.get_tensor_data(w)

    def f(xa, wa):
        return float(np.sum(np.tanh(np.tanh(xa * wa) * wa) ** 2))

    np.testing.assert_allclose(got[streams[x]], _numeric_grad(lambda a: f(a, wv), xv), rtol=1e-6,
                               atol=1e-9)
    np.testing.assert_allclose(got[streams[w]], _numeric_grad(lambda a: f(xv, a), wv), rtol=1e-6,
                               atol=1e-9)


def test_called_graphs_grad_info_is_reused() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2), popxl.float64, name="x")
        inner = ir.create_graph(lambda a: ops.exp(a), x.spec)
        inner_info = autodiff(inner)
        graph = ir.create_graph(lambda a: ops.call(inner, a)[0] * 2.0, x.spec)
        info = autodiff(graph, called_graphs_grad_info={inner: inner_info})
    assert inner_info.graph in info.graph.called_graphs
    assert all(g.name != "grad" for g in ir.graphs)
    assert sum(1 for g in ir.graphs if g.name.startswith(inner.name + "_grad")) == 1


def test_grad_info_helpers_map_to_the_call_sites() -> None:
    ir = popxl.Ir()
    graph, x, w, b = _setup(ir)
    with ir.main_graph:
        site = ops.call_with_info(graph, x, w, b)
        info = autodiff(graph, grads_required=[graph.inputs[1]])
        seeds = [popxl.constant(np.ones(t.shape), popxl.float64) for t in graph.outputs[:2]]
        acts = info.inputs_dict(site)
        assert set(acts) == set(info.graph.inputs[2:])
        grad_site = ops.call_with_info(info.graph, *seeds, inputs_dict=acts)
    assert info.fwd_graph_ins_to_grad_parent_outs(grad_site) == {
        graph.inputs[1]: grad_site.parent_output(0)}
    assert info.fwd_parent_ins_to_grad_parent_outs(site, grad_site) == {
        w: grad_site.parent_output(0)}
    other = popxl.Ir()
    other_graph, *_ = _setup(other)
    with other.main_graph:
        other_site = ops.call_with_info(other_graph, *other.main_graph.variables)
    with pytest.raises(TypeError):
        info.inputs_dict(other_site)


def test_modifying_inplace_ops_are_refused_by_name() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2), name="x")

        def fn(a):
            b = a * 2.0
            ops.var_updates.accumulate_(b, a)
            return b

        graph = ir.create_graph(fn, x.spec)
    with pytest.raises(errors.AutodiffError, match=r"accumulate_.*test_autodiff.py"):
        autodiff(graph)
    with pytest.raises(errors.AutodiffError, match="main graph"):
        autodiff(ir.main_graph)


def test_view_inplace_ops_are_allowed() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((2, 3)), name="x")
        graph = ir.create_graph(lambda a: ops.reshape_(a * 1.0, (6,)), x.spec)
    info = autodiff(graph)
    assert len(info.expected_outputs) == 1


def test_no_gradient_path_gives_zeros() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2), name="x")
        y = popxl.variable(np.ones(2), name="y")
        graph = ir.create_graph(lambda a, b: ops.detach(a) * 2.0 + b, x.spec, y.spec)
        site = ops.call_with_info(graph, x, y)
        info = autodiff(graph)
        seed = popxl.constant(np.ones(2), popxl.float32)
        dx, dy = ops.call(info.graph, seed, inputs_dict=info.inputs_dict(site))
        streams = [popxl.d2h_stream((2,), popxl.float32, n) for n in ("dx", "dy")]
        for s, t in zip(streams, (dx, dy)):
            ops.host_store(s, t)
    with popxl.Session(ir) as session:
        got = session.run()
    np.testing.assert_array_equal(got[streams[0]], 0.0)
    np.testing.assert_array_equal(got[streams[1]], 1.0)


@pytest.mark.parametrize("weight_used_twice", [False, True])
def test_transposed_weight_gradient_comes_out_in_the_weights_layout(
        weight_used_twice: bool) -> None:
    """``x @ w.T`` (torch's linear): w's gradient is ``dy.T @ x``, one matmul of w's shape,
    not a transposed view of ``x.T @ dy``; with two uses of w.T the gradients still add up."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(RNG.normal(size=(4, 6)), popxl.float64, name="x")
        w = popxl.variable(RNG.normal(size=(5, 6)), popxl.float64, name="w")

        def linear(a, b):
            wt = ops.transpose(b, (1, 0))
            y = ops.matmul(a, wt)
            if weight_used_twice:
                y = y * ops.matmul(ops.tanh(a), wt)
            return ops.sum(ops.tanh(y))

        graph = ir.create_graph(linear, x.spec, w.spec)
        site = ops.call_with_info(graph, x, w)
        info = autodiff(graph)
        seed = popxl.constant(1.0, popxl.float64)
        grad_site = ops.call_with_info(info.graph, seed, inputs_dict=info.inputs_dict(site))
        dw = info.fwd_parent_ins_to_grad_parent_outs(site, grad_site)[w]
        stream = popxl.d2h_stream(w.shape, w.dtype, "dw")
        ops.host_store(stream, dw)
    index = [c.fwd_tensor for c in info.expected_outputs].index(graph.inputs[1])
    made = info.graph.outputs[index].producer
    if not weight_used_twice:
        assert made.defn.name == "matmul" and made.outputs[0].shape == (5, 6)
    with popxl.Session(ir) as session:
        got = session.run()[stream]
    xv, wv = session.get_tensor_data(x), session.get_tensor_data(w)

    def f(wa):
        y = xv @ wa.T
        if weight_used_twice:
            y = y * (np.tanh(xv) @ wa.T)
        return float(np.sum(np.tanh(y)))

    np.testing.assert_allclose(got, _numeric_grad(f, wv), rtol=1e-6, atol=1e-9)
