"""Sub-module trees linked when assigned (``from_list``, iteration,
``from_variable_factories``) and ``call_module``'s inherited gradient info, as popxl-addons
programs write them."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph as popxl
import xlgraph.addons as addons
from tests.addons.helpers import fetch, run
from xlgraph import ops
from xlgraph.addons.variable_factory import VariableFactory

SPEC = popxl.TensorSpec((2, 4), popxl.float32)


class Mlp(addons.Module):
    def build(self, x):
        w = self.add_variable_input("w", lambda: np.eye(4, dtype=np.float32) * 2.0)
        return ops.relu(x @ w)


class Norm(addons.Module):
    def build(self, x):
        g = self.add_variable_input("weight", lambda: np.full(4, 0.5, np.float32))
        return x * g


class Tower(addons.Module):
    def __init__(self, depth, how):
        super().__init__()
        self.blocks = addons.Module.from_list([Mlp() for _ in range(depth)])
        self.norm = Norm()
        self.how = how

    def build(self, x):
        for i, blk in enumerate(self.blocks):
            blk = {"iter": blk, "index": self.blocks[i], "get": self.blocks.get(i)}[self.how]
            x = blk(x)
        return self.norm(x)


@pytest.mark.parametrize("how", ["iter", "index", "get"])
def test_names_follow_the_assignment_chain(how):
    tower = Tower(2, how)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.arange(8, dtype=np.float32).reshape(2, 4) - 3.0, name="x")
        facts, fwd = tower.create_graph(x)
        names = ["blocks.0.w", "blocks.1.w", "norm.weight"]
        assert facts.keys_flat() == names and fwd.args.keys_flat() == names
        again, _ = tower.create_graph(x)  # the links survive a second graph creation
        assert again.keys_flat() == names
        (y,) = fwd.bind(facts.init()).call(x)
        streams = fetch(y)
    (got,) = run(ir, streams)
    data = np.arange(8, dtype=np.float32).reshape(2, 4) - 3.0
    np.testing.assert_allclose(got, np.maximum(np.maximum(data * 2, 0) * 2, 0) * 0.5)


def test_deep_links_and_iteration_rules():
    class Outer(addons.Module):
        def __init__(self):
            super().__init__()
            self.inner = Tower(1, "iter")

        def build(self, x):
            return self.inner(x)

    outer = Outer()
    ir = popxl.Ir()
    with ir.main_graph:
        facts, _ = outer.create_graph(SPEC)
    assert facts.keys_flat() == ["inner.blocks.0.w", "inner.norm.weight"]
    assert outer.get("inner.blocks.0") is outer.inner.blocks[0]
    with pytest.raises(AttributeError):
        iter(outer)


def test_from_variable_factories_inputs_made_in_the_graph_being_built():
    class Proj(addons.Module):
        def build(self, x):
            self.proj = addons.Module.from_variable_factories(
                [VariableFactory(lambda: np.eye(4, dtype=np.float32) * 3.0),
                 VariableFactory(lambda: np.ones(4, np.float32))])
            assert self.proj[0].shape == (4, 4)
            return x @ self.proj[0] + self.proj[1]

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.arange(8, dtype=np.float32).reshape(2, 4), name="x")
        facts, fwd = Proj().create_graph(x)
        assert fwd.args.keys_flat() == ["proj.0", "proj.1"]
        (y,) = fwd.bind(facts.init()).call(x)
        streams = fetch(y)
    (got,) = run(ir, streams)
    np.testing.assert_allclose(got, np.arange(8).reshape(2, 4) * 3.0 + 1.0)


class Custom(addons.Module):
    """``y = x * w``; its gradient (by hand) scales ``dx`` by 10 to be recognisable."""

    def build(self, x):
        w = self.add_variable_input("w", lambda: np.full(x.shape, 2.0, np.float32))
        return x * w

    def build_grad(self, dy):
        self.var_grad["w"] = dy
        return dy * 10.0


class Middle(addons.Module):
    def build(self, x):
        (y,) = self.call_module(Custom(), name="c")(x)
        return y + 1.0


class Top(addons.Module):
    def build(self, x):
        (y,) = self.call_module(Middle(), name="m", autodiff="none")(x)
        return y * 3.0


def test_call_module_always_inherits_the_called_graph_info():
    ir = popxl.Ir()
    with ir.main_graph:
        facts, top = Top().create_graph(SPEC)
        assert facts.keys_flat() == ["m.c.w"]
        custom = [g for g in top.called_graphs_grad_info if "Custom" in g.name]
        assert len(custom) == 1  # Custom's entry reached Top through Middle
        grad = top.autodiff(method="autodiff", grads_required=top.graph.inputs[:1])
        x = popxl.variable(np.ones((2, 4), np.float32), name="x")
        info = top.bind(facts.init()).call_with_info(x)
        dy = popxl.constant(np.ones((2, 4), np.float32))
        (dx,) = grad.call(dy, args=grad.grad_graph_info.inputs_dict(info))
        streams = fetch(dx)
    (got,) = run(ir, streams)
    np.testing.assert_allclose(got, np.full((2, 4), 30.0))  # Custom's build_grad: 3 * 10
