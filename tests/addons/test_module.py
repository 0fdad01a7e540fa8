"""``popxl_addons.module`` / ``graph``: what ``Module`` records while it builds (``aux``,
``var_grad``), custom gradients, ``call_module``, constructor arguments and the graph
wrappers."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import xlgraph as popxl
import xlgraph.addons as addons
from tests.addons.helpers import fetch, run

SPEC = popxl.TensorSpec((2, 3), popxl.float32)


class Scale(addons.Module):
    """``y = x * w`` with a deliberately unusual gradient, to see that build_grad is used."""

    def build(self, x):
        w = self.add_variable_input("w", lambda: np.full(x.shape, 2.0, np.float32))
        self.aux["x"] = x
        self.aux["note"] = "kept as stored"
        return x * w

    def build_grad(self, dy):
        assert self.aux["note"] == "kept as stored"
        self.var_grad["w"] = dy * self.aux["x"] * 10.0
        return dy * 3.0


class Plain(addons.Module):
    def build(self, x):
        w = self.add_variable_input("w", lambda: np.full(x.shape, 2.0, np.float32))
        return x * w


def test_create_graph_keeps_aux_and_empties_the_module():
    ir = popxl.Ir()
    with ir.main_graph:
        m = Scale()
        facts, fwd = m.create_graph(SPEC)
    assert m.aux == {} and m.var_grad == {} and m._variable_factories.len() == 0
    assert list(fwd.aux) == ["x", "note"] and fwd.from_module is m
    assert facts.keys_flat() == ["w"] and fwd.args.w in fwd.graph.inputs


def test_build_grad_gradient_graph_order_and_values():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="x")
        facts, fwd = Scale().create_graph(x)
        grad = fwd.autodiff()
        info = grad.grad_graph_info
        # the aux tensor became a forward output; the grad graph reads it after the seed
        assert len(fwd.graph.outputs) == 2
        assert [c.connection_type.name for c in info.expected_inputs] == ["FwdGrad", "Fwd"]
        assert info.expected_inputs[1].fwd_tensor is fwd.graph.inputs[0]
        assert grad.graph.inputs[1].name == "x"  # named after the aux key
        # outputs: the returned gradients, then the variables' gradients
        assert [c.fwd_tensor for c in info.expected_outputs] == list(fwd.graph.inputs)
        variables = facts.init()
        fwd_info = fwd.bind(variables).call_with_info(x)
        dy = popxl.constant(np.ones((2, 3), np.float32))
        dx, dw = grad.call(dy, args=info.inputs_dict(fwd_info))
        streams = fetch(dx, dw)
        with pytest.raises(RuntimeError, match="Autodiff has already been applied"):
            fwd.autodiff()
        fwd.autodiff(method="autodiff", force=True)
    got_dx, got_dw = run(ir, streams)
    np.testing.assert_allclose(got_dx, np.full((2, 3), 3.0))
    np.testing.assert_allclose(got_dw, 10.0 * np.arange(6).reshape(2, 3))


def test_constructor_arguments_and_inline_calls():
    with pytest.raises(ValueError, match="You cannot use graph caching if you have implemented "
                                         "`build_grad`"):
        Scale(cache=True, grad_inlining_error="loud")  # cache is checked first
    with pytest.raises(ValueError, match="grad_inlining_error should be one of 'error', "
                                         "'warning', 'none'.*loud"):
        Plain(grad_inlining_error="loud")

    class Calls(addons.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def build(self, x):
            return self.inner(x)

    ir = popxl.Ir()
    with ir.main_graph:
        with pytest.raises(Exception, match="`build_grad` has been implemented"):
            Calls(Scale()).create_graph(SPEC)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            facts, _ = Calls(Scale(grad_inlining_error="warning")).create_graph(SPEC)
        assert [w.category for w in seen] == [UserWarning]
        assert "`build_grad` has been implemented" in str(seen[0].message)
        assert facts.keys_flat() == ["inner.w"]
        Calls(Scale(grad_inlining_error="none")).create_graph(SPEC)
    assert Scale().implements_grad_graph and not Plain().implements_grad_graph


def test_build_grad_graphs_are_not_recursively_autodiffable():
    """A graph built from a module with build_grad keeps its hand-written gradient: autodiff of
    a graph that calls it without that gradient's info is refused (popxl-addons marks such graphs
    as not recursively autodiff-able), and with the info it uses build_grad's graph."""
    ir = popxl.Ir()
    with ir.main_graph:
        _, scale = Scale().create_graph(SPEC)
        _, plain = Plain().create_graph(SPEC)
        assert not scale.graph.recursively_autodiffable and plain.graph.recursively_autodiffable

        class Caller(addons.Module):
            def build(self, x):
                w = self.add_variable_input("w", lambda: np.full((2, 3), 2.0, np.float32))
                return scale.bind(addons.NamedTensors(w=w)).call(x)[0]

        _, caller = Caller().create_graph(SPEC)
        with pytest.raises(popxl.errors.AutodiffError, match="marked as unsafe to autodiff"):
            addons.autodiff(caller)
        info = scale.autodiff().grad_graph_info
        grad = addons.autodiff(caller, called_graphs_grad_info={scale.graph: info})
        x = popxl.variable(np.ones((2, 3), np.float32), name="x")
        w = popxl.variable(np.full((2, 3), 2.0, np.float32), name="w")
        fwd_info = caller.bind(addons.NamedTensors(w=w)).call_with_info(x)
        dy = popxl.constant(np.ones((2, 3), np.float32))
        dx, dw = grad.call(dy, args=grad.grad_graph_info.inputs_dict(fwd_info))
        streams = fetch(dx, dw)
    got_dx, got_dw = run(ir, streams)
    np.testing.assert_allclose(got_dx, np.full((2, 3), 3.0))  # build_grad's, not 2.0
    np.testing.assert_allclose(got_dw, np.full((2, 3), 10.0))


def test_create_grad_graph_info_describes_a_hand_built_gradient_graph():
    """``create_grad_graph_info``: inputs in ``fwd_tensors`` take forward values, the others
    the gradients of the forward outputs; outputs are the gradients of the forward inputs."""
    ir = popxl.Ir()
    with ir.main_graph:
        m = Plain()
        _, fwd = m.create_graph(SPEC)
        x_in, w_in = fwd.graph.inputs
        grad = ir.create_empty_graph("plain_grad")
        with grad:
            w_val = popxl.graph_input((2, 3), popxl.float32, "w")
            dy = popxl.graph_input((2, 3), popxl.float32, "dy")
            popxl.graph_output(dy * w_val)
        info = m.create_grad_graph_info(grad, fwd, {w_val: w_in}, grads_required=[x_in])
        assert [c.connection_type.name for c in info.expected_inputs] == ["Fwd", "FwdGrad"]
        assert info.expected_inputs[0].fwd_tensor is w_in
        assert info.expected_inputs[1].fwd_tensor is fwd.graph.outputs[0]
        assert [c.fwd_tensor for c in info.expected_outputs] == [x_in]
        x = popxl.variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="x")
        w = popxl.variable(np.full((2, 3), 5.0, np.float32), name="w")
        fwd_info = fwd.bind(addons.NamedTensors(w=w)).call_with_info(x)
        ones = popxl.constant(np.ones((2, 3), np.float32))
        (dx,) = addons.GraphWithNamedArgs.from_grad_graph(info).call(
            args={**info.inputs_dict(fwd_info), dy: ones})
        streams = fetch(dx)
        with pytest.raises(ValueError, match="1 outputs, grads_required has 2"):
            m.create_grad_graph_info(grad, fwd, {w_val: w_in})
        with pytest.raises(ValueError, match="2 gradient inputs"):
            m.create_grad_graph_info(grad, fwd, {}, grads_required=[x_in])
    (got,) = run(ir, streams)
    np.testing.assert_allclose(got, np.full((2, 3), 5.0))
