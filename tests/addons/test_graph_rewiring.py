"""Transforms that change graphs already built, as popxl-addons programs use them:
``route_tensor_into_graph`` rewiring call and repeat sites, ``autodiff_with_accumulation``
in the gradient graph itself, with PopART's op classes."""

from __future__ import annotations

import re

import numpy as np
import pytest

import xlgraph as popxl
import xlgraph.addons as addons
from xlgraph import ops
from xlgraph.popart_compat._internal import ir as _ir


def test_route_tensor_rewires_every_existing_site():
    """Two sites of ``body`` in main and one repeat of it inside ``mid``: one new input each,
    every site passes ``hits`` (modified), so its 1 + 3 + 2 increments reach main."""
    ir = popxl.Ir()
    body = ir.create_empty_graph("body")
    mid = ir.create_empty_graph("mid")
    with mid:
        ops.repeat(body, 2)
    with ir.main_graph:
        hits = popxl.variable(np.float32(0.0), popxl.float32, name="hits")
        ops.call(body)
        ops.repeat(body, 3)
        ops.call(mid)
    with body:
        h = addons.route_tensor_into_graph(hits, modified=True)
        assert addons.route_tensor_into_graph(hits, modified=True) is h  # no second input
        ops.var_updates.accumulate_(h, popxl.constant(1.0, popxl.float32))
    assert len(body.inputs) == 1 and len(mid.inputs) == 1
    assert addons.route_tensor_into_graph(hits, ir.main_graph) is hits
    assert addons.is_subgraph(body, body) and addons.is_subgraph(ir.main_graph, body)
    assert not addons.is_subgraph(body, mid)
    with pytest.raises(ValueError, match="is not in the graph.*is not in a known parent graph"
                       r".* \[at test_graph_rewiring.py:\d+\]$"):
        addons.route_tensor_into_graph(h, ir.main_graph)
    with popxl.Session(ir, "cpu") as s:
        s.run()
        assert s.get_tensor_data(hits) == 6.0


def test_route_tensor_reads_without_modifying():
    ir = popxl.Ir()
    body = ir.create_empty_graph("body")
    with body:
        acc = popxl.graph_input((2,), popxl.float32, "acc", by_ref=True)
    with ir.main_graph:
        w = popxl.variable(np.array([1.0, 2.0], np.float32), name="w")
        total = popxl.variable(np.zeros(2, np.float32), name="total")
        ops.call_with_info(body, total).set_parent_input_modified(total)
    with body:
        ops.var_updates.accumulate_(acc, addons.route_tensor_into_graph(w) * 3.0)
    site = body.call_sites[0]
    assert site.inputs[1] is w and site.attrs["modified"] == {0}
    with popxl.Session(ir, "cpu") as s:
        s.run()
        np.testing.assert_allclose(s.get_tensor_data(total), [3.0, 6.0])
        np.testing.assert_allclose(s.get_tensor_data(w), [1.0, 2.0])


class Lin(addons.Module):
    def build(self, x):
        w = self.add_variable_input("w", lambda: np.array([[1.0, -1.0], [2.0, 0.5]], np.float32))
        return x @ w


def test_autodiff_with_accumulation_in_the_gradient_graph():
    """Only the accumulated gradients are required by default (no outputs); the IR gains the
    one gradient graph; it holds two Accumulate ops (accumulator and counter); the mean over
    two calls matches numpy."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        x = popxl.variable(np.array([[1.0, 2.0]], np.float32), name="x")
        facts, fwd = Lin().create_graph(x)
        before = len(ir.graphs)
        accum_facts, bwd = addons.autodiff_with_accumulation(fwd, [fwd.args.w])
        assert len(ir.graphs) == before + 1 and bwd.graph.outputs == ()
        assert [t.name for t in bwd.graph.inputs[-2:]] == ["mean_accum_counter", "accum.w"]
        assert accum_facts.keys_flat() == ["mean_accum_counter", "accum.w"]
        views = bwd.graph._pb_graph.getOps()
        accum_views = [v for v in views if isinstance(v, _ir.op.AccumulateOp)]
        assert len(accum_views) == 2 and {v.opType() for v in accum_views} == {"Accumulate"}
        variables, accum = facts.init(), accum_facts.init()
        info = fwd.bind(variables).call_with_info(x)
        for scale in (1.0, 3.0):
            dy = popxl.constant(np.full((1, 2), scale, np.float32))
            bwd.bind(accum).call(dy, args=bwd.grad_graph_info.inputs_dict(info))
    with popxl.Session(ir, "cpu") as s:
        s.run()
        got = s.get_tensor_data(accum.accum.w)
        count = s.get_tensor_data(accum.mean_accum_counter)
    np.testing.assert_allclose(got, np.array([[1.0], [2.0]]) @ np.full((1, 2), 2.0))
    assert count == 2.0


def test_autodiff_with_accumulation_keeps_other_required_gradients():
    ir = popxl.Ir()
    with ir.main_graph:
        _, fwd = Lin().create_graph(popxl.TensorSpec((1, 2), popxl.float32))
        x = fwd.graph.inputs[0]
        _, bwd = addons.autodiff_with_accumulation(fwd, [fwd.args.w], grads_required=[x])
        assert len(bwd.graph.outputs) == 1 and bwd.graph.outputs[0].shape == (1, 2)
        assert [c.fwd_tensor for c in bwd.grad_graph_info.expected_outputs] == [x]
    names = {v.opType() for v in bwd.graph._pb_graph.getOps()}
    assert "Accumulate" in names and not any(re.match("AccumulateMean", n) for n in names)
