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
from xlgraph import ops

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
        with pytest.raises(ValueError, match="already differentiated"):
            fwd.autodiff()
        fwd.autodiff(method="autodiff", force=True)
    got_dx, got_dw = run(ir, streams)
    np.testing.assert_allclose(got_dx, np.full((2, 3), 3.0))
    np.testing.assert_allclose(got_dw, 10.0 * np.arange(6).reshape(2, 3))


def test_build_grad_errors():
    class NoVarGrad(Scale):
        def build_grad(self, dy):
            return dy

    class TooMany(Scale):
        def build_grad(self, dy):
            self.var_grad["w"] = dy
            return dy, dy

    ir = popxl.Ir()
    with ir.main_graph:
        for cls, match in ((NoVarGrad, "var_grad"), (TooMany, "returned 2")):
            _, fwd = cls().create_graph(SPEC)
            with pytest.raises(ValueError, match=match):
                fwd.autodiff()
        _, fwd = Scale().create_graph(SPEC)
        with pytest.raises(ValueError, match="not outputs"):
            fwd.autodiff(grads_provided=fwd.graph.inputs)
        _, plain = Plain().create_graph(SPEC)
        with pytest.raises(ValueError, match="build_grad"):
            plain.autodiff(method="build_grad")


def test_constructor_arguments_and_inline_calls():
    with pytest.raises(ValueError, match="cache"):
        Scale(cache=True)
    with pytest.raises(ValueError, match="grad_inlining_error"):
        Plain(grad_inlining_error="loud")

    class Calls(addons.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def build(self, x):
            return self.inner(x)

    ir = popxl.Ir()
    with ir.main_graph:
        with pytest.raises(ValueError, match="inline"):
            Calls(Scale()).create_graph(SPEC)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            facts, _ = Calls(Scale(grad_inlining_error="warning")).create_graph(SPEC)
        assert any("inline" in str(w.message) for w in seen)
        assert facts.keys_flat() == ["inner.w"]
        Calls(Scale(grad_inlining_error="none")).create_graph(SPEC)
    assert Scale().implements_grad_graph and not Plain().implements_grad_graph


class Outer(addons.Module):
    def build(self, x):
        (y,) = self.call_module(Scale(), name="inner")(x)
        return y + 1.0


def test_call_module_registers_the_custom_gradient_for_the_outer_autodiff():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="x")
        facts, fwd = Outer().create_graph(x)
        assert facts.keys_flat() == ["inner.w"]
        assert len(fwd.called_graphs_grad_info) == 1
        grad = addons.autodiff(fwd)
        variables = facts.init()
        info = fwd.bind(variables).call_with_info(x)
        assert len(info.outputs) == 1  # only the original output
        dy = popxl.constant(np.ones((2, 3), np.float32))
        dx, dw = grad.call(dy, args=grad.grad_graph_info.inputs_dict(info))
        streams = fetch(dx, dw)
    got_dx, got_dw = run(ir, streams)
    np.testing.assert_allclose(got_dx, np.full((2, 3), 3.0))  # build_grad's rule, not x*w's
    np.testing.assert_allclose(got_dw, 10.0 * np.arange(6).reshape(2, 3))


class Block(addons.Module):
    def __init__(self):
        super().__init__()
        self.ffn = addons.layers.Linear(3) if hasattr(addons, "layers") else None

    def build(self, x):
        return self.ffn(x)


class Stack(addons.Module):
    def build(self, x):
        for layer in self:
            x = layer(x)
        return x


def test_attribute_names_scope_and_from_list_iteration():
    ir = popxl.Ir()
    with ir.main_graph:
        facts, fwd = Block().create_graph(SPEC)
        assert facts.keys_flat() == ["ffn.weight", "ffn.bias"]
        assert fwd.args.ffn.weight.id.endswith("ffn/weight")
        stack = Stack.from_list([Block(), Block()])
        assert isinstance(stack, Stack) and stack[1] is stack.get("1")
        facts, _ = stack.create_graph(SPEC)
        assert facts.keys_flat()[:2] == ["0.ffn.weight", "0.ffn.bias"]
    with pytest.raises(AttributeError, match="iterable"):
        iter(Plain())


def test_graph_with_named_args_bind_copy_and_schedule():
    ir = popxl.Ir()
    with ir.main_graph:
        facts, fwd = Scale().create_graph(SPEC)
        variables = facts.init()
        extra = addons.NamedTensors.from_dict({"w": variables.w, "unknown": variables.w})
        bound = fwd.bind(extra)  # names only one side has are ignored
        assert bound.args == {fwd.args.w: variables.w}
        copy = fwd.copy()
        assert copy.graph is fwd.graph and copy.from_module is None and copy.aux == {}
        assert "mul" in fwd.print_schedule()
        with pytest.raises(AttributeError, match="not a gradient graph"):
            fwd.grad_graph_info  # noqa: B018
    with ir.main_graph:
        x = popxl.variable(np.ones((2, 3), np.float32))
        (y,) = fwd.call(x, args=variables)
        assert y.shape == (2, 3)
        _ = ops.relu(y)
