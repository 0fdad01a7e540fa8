"""``ops.conditional``: run-time branch choice, site info, lowering, aliasing and autodiff."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph
from xlgraph import ops
from xlgraph.errors import CallInputError, DTypeError, ShapeError
from xlgraph.transforms import autodiff

OPTIMIZE = [True, False]


def _run(ir: xlgraph.Ir, feeds: dict, optimize: bool) -> tuple[xlgraph.Session, dict]:
    session = xlgraph.Session(ir, optimize=optimize)
    with session:
        out = session.run(feeds)
    return session, out


def _double(x: xlgraph.Tensor, w: xlgraph.Tensor) -> xlgraph.Tensor:
    return x * w + 1.0


def _negate(x: xlgraph.Tensor) -> xlgraph.Tensor:
    return -x


def _two_branch_ir():
    ir = xlgraph.Ir()
    with ir.main_graph:
        x_s = xlgraph.h2d_stream((3,), xlgraph.float32, "x")
        c_s = xlgraph.h2d_stream((1,), xlgraph.bool, "c")
        x, c = ops.host_load(x_s), ops.host_load(c_s)
        w = xlgraph.variable(np.array([2.0, 3.0, 4.0], np.float32), name="w")
        then_g = ir.create_graph(_double, x, w)
        else_g = ir.create_graph(_negate, x)
        info = ops.conditional_with_info(c, then_g, else_g, [x], [x],
                                         then_inputs_dict={then_g.inputs[1]: w})
        out = xlgraph.d2h_stream((3,), xlgraph.float32, "y")
        ops.host_store(out, info.outputs[0])
    return ir, x_s, c_s, out, info, (x, w, c)


@pytest.mark.parametrize("optimize", OPTIMIZE)
@pytest.mark.parametrize("flag", [True, False])
def test_runs_the_branch_chosen_at_run_time(optimize: bool, flag: bool) -> None:
    ir, x_s, c_s, out, _, _ = _two_branch_ir()
    x = np.array([1.0, -2.0, 0.5], np.float32)
    _, got = _run(ir, {x_s: x, c_s: np.array([flag])}, optimize)
    expected = x * np.array([2.0, 3.0, 4.0], np.float32) + 1.0 if flag else -x
    np.testing.assert_allclose(got[out], expected)


def test_generated_source_has_one_if_and_one_session_serves_both_branches() -> None:
    ir, x_s, c_s, out, _, _ = _two_branch_ir()
    session = xlgraph.Session(ir)
    assert session.source.count(".item():") == 1
    assert "else:" in session.source
    x = np.ones(3, np.float32)
    with session:
        a = session.run({x_s: x, c_s: np.array([True])})[out].copy()
        b = session.run({x_s: x, c_s: np.array([False])})[out]
    np.testing.assert_allclose(a, [3.0, 4.0, 5.0])
    np.testing.assert_allclose(b, -x)


def test_site_info_index_helpers() -> None:
    _, _, _, _, info, (x, w, c) = _two_branch_ir()
    then_g, else_g = info.called_graph
    assert info.then_called_graph is then_g and info.else_called_graph is else_g
    assert info.inputs == (c, x, w, x)
    assert info.parent_input(0) is c
    assert [info.is_parent_index_in_then_branch(i) for i in range(4)] == [
        False, True, True, False]
    assert info.graph_to_parent_input_index(1, then_branch=True) == 2
    assert info.graph_to_parent_input_index(0, then_branch=False) == 3
    assert [info.parent_to_graph_input_index(i) for i in (1, 2, 3)] == [0, 1, 0]
    assert info.graph_to_parent(then_g.inputs[1]) is w
    assert info.graph_to_parent(else_g.inputs[0]) is x
    assert info.graph_to_parent(else_g.outputs[0]) is info.parent_output(0)
    assert info.parent_to_graph(w) is then_g.inputs[1]
    assert info.parent_to_graph(x, then_branch=False) is else_g.inputs[0]
    with pytest.raises(ValueError):
        info.parent_to_graph(w, then_branch=False)
    with pytest.raises(IndexError):
        info.parent_to_graph_input_index(0)
    with pytest.raises(IndexError):
        info.graph_to_parent_input_index(1, then_branch=False)
    assert "ConditionalSiteInfo" in repr(info)


def test_build_time_errors() -> None:
    ir = xlgraph.Ir()
    with ir.main_graph:
        x = xlgraph.variable(np.ones(3, np.float32), name="x")
        flag = xlgraph.constant(np.array([True, False]))
        g_neg = ir.create_graph(_negate, x)
        g_sum = ir.create_graph(lambda t: ops.sum(t), x)
        with pytest.raises(DTypeError, match="bool"):
            ops.conditional(x, g_neg, g_neg, [x], [x])
        with pytest.raises(ShapeError, match="one element"):
            ops.conditional(flag, g_neg, g_neg, [x], [x])
        with pytest.raises(ShapeError, match="disagree on output 0"):
            ops.conditional(True, g_neg, g_sum, [x], [x])
        with pytest.raises(CallInputError, match="missing"):
            ops.conditional(True, g_neg, g_neg, [x])
        with pytest.raises(TypeError, match="subgraph"):
            ops.conditional(True, ir.main_graph, g_neg, [], [x])


@pytest.mark.parametrize("optimize", OPTIMIZE)
@pytest.mark.parametrize("mark_modified", [False, True])
def test_in_place_changes_reach_the_parent_only_when_marked(optimize: bool,
                                                            mark_modified: bool) -> None:
    def bump(t: xlgraph.Tensor) -> xlgraph.Tensor:
        return ops.add_(t, 1.0)

    ir = xlgraph.Ir()
    with ir.main_graph:
        c_s = xlgraph.h2d_stream((), xlgraph.bool, "c")
        v = xlgraph.variable(np.zeros(2, np.float32), name="v")
        g_bump = ir.create_graph(bump, v)
        g_keep = ir.create_graph(lambda t: t + 0.0, v)
        info = ops.conditional_with_info(ops.host_load(c_s), g_bump, g_keep, [v], [v])
        if mark_modified:
            info.set_parent_input_modified(v)
    session = xlgraph.Session(ir, optimize=optimize)
    with session:
        session.run({c_s: np.array(True)})
        session.run({c_s: np.array(False)})
        session.run({c_s: np.array(True)})
    np.testing.assert_array_equal(session.get_tensor_data(v), [2.0, 2.0] if mark_modified else 0)


@pytest.mark.parametrize("optimize", OPTIMIZE)
def test_output_is_not_an_alias_of_a_later_modified_input(optimize: bool) -> None:
    ir = xlgraph.Ir()
    with ir.main_graph, xlgraph.in_sequence():
        v = xlgraph.variable(np.array([1.0, 2.0], np.float32), name="v")
        g = ir.create_graph(lambda t: t, v)
        (y,) = ops.conditional(True, g, g, [v], [v])
        ops.var_updates.accumulate_(v, xlgraph.constant(np.ones(2, np.float32)))
        out = xlgraph.d2h_stream((2,), xlgraph.float32, "y")
        ops.host_store(out, y)
    session, got = _run(ir, {}, optimize)
    np.testing.assert_array_equal(got[out], [1.0, 2.0])
    np.testing.assert_array_equal(session.get_tensor_data(v), [2.0, 3.0])


@pytest.mark.parametrize("optimize", OPTIMIZE)
def test_conditional_inside_a_repeat_body(optimize: bool) -> None:
    def body(count: xlgraph.Tensor, acc: xlgraph.Tensor):
        odd = ops.equal(ops.fmod(count, 2.0), xlgraph.constant(np.float32(1.0)))
        add_g = ir.create_graph(lambda a, k: a + k, acc, count)
        keep_g = ir.create_graph(lambda a: a * 1.0, acc)
        (acc,) = ops.conditional(odd, add_g, keep_g, [acc, count], [acc])
        return count + 1.0, acc

    ir = xlgraph.Ir()
    with ir.main_graph:
        spec = xlgraph.TensorSpec((), xlgraph.float32)
        loop = ir.create_graph(body, spec, spec)
        zero = xlgraph.constant(np.float32(0.0))
        _, total = ops.repeat(loop, 7, zero, zero)
        out = xlgraph.d2h_stream((), xlgraph.float32, "total")
        ops.host_store(out, total)
    _, got = _run(ir, {}, optimize)
    assert float(got[out]) == 1 + 3 + 5


@pytest.mark.parametrize("flag", [True, False])
def test_gradient_of_a_conditional_is_the_taken_branch_gradient(flag: bool) -> None:
    def branch_a(x: xlgraph.Tensor, w: xlgraph.Tensor) -> xlgraph.Tensor:
        return ops.tanh(x * w)

    def branch_b(x: xlgraph.Tensor) -> xlgraph.Tensor:
        return ops.exp(x) * x

    def fwd(c: xlgraph.Tensor, x: xlgraph.Tensor, w: xlgraph.Tensor) -> xlgraph.Tensor:
        ga = ir.create_graph(branch_a, x, w)
        gb = ir.create_graph(branch_b, x)
        (y,) = ops.conditional(c, ga, gb, [x, w], [x])
        return y * 3.0

    rng = np.random.default_rng(0)
    x, w, dy = (rng.normal(size=(2, 3)) for _ in range(3))
    ir = xlgraph.Ir()
    with ir.main_graph:
        graph = ir.create_graph(fwd, xlgraph.TensorSpec((), xlgraph.bool),
                                xlgraph.TensorSpec((2, 3), xlgraph.float64),
                                xlgraph.TensorSpec((2, 3), xlgraph.float64))
        info = autodiff(graph, grads_required=graph.inputs[1:])
        streams = [xlgraph.h2d_stream(s.shape, s.dtype, n) for s, n in
                   zip([*graph.inputs, graph.outputs[0]], ["c", "x", "w", "dy"])]
        loaded = [ops.host_load(s) for s in streams]
        site = ops.call_with_info(graph, *loaded[:3])
        grads = ops.call(info.graph, loaded[3], inputs_dict=info.inputs_dict(site))
        outs = [xlgraph.d2h_stream(g.shape, g.dtype, f"g{i}") for i, g in enumerate(grads)]
        for s, g in zip(outs, grads):
            ops.host_store(s, g)
    feeds = dict(zip(streams, [np.array(flag), x, w, dy]))
    _, got = _run(ir, feeds, True)
    _, interpreted = _run(ir, feeds, False)
    if flag:
        t = np.tanh(x * w)
        gx, gw = 3 * dy * (1 - t * t) * w, 3 * dy * (1 - t * t) * x
    else:
        gx, gw = 3 * dy * np.exp(x) * (1 + x), np.zeros_like(w)
    np.testing.assert_allclose(got[outs[0]], gx, rtol=1e-12)
    np.testing.assert_allclose(got[outs[1]], gw, rtol=1e-12)
    for s in outs:
        np.testing.assert_array_equal(got[s], interpreted[s])


def test_gradient_graph_refuses_a_branch_that_modifies_in_place() -> None:
    ir = xlgraph.Ir()
    with ir.main_graph:
        def fwd(c: xlgraph.Tensor, x: xlgraph.Tensor) -> xlgraph.Tensor:
            g = ir.create_graph(lambda t: ops.add_(t * 1.0, 1.0), x)
            return ops.conditional(c, g, g, [x], [x])[0]

        graph = ir.create_graph(fwd, xlgraph.TensorSpec((), xlgraph.bool),
                                xlgraph.TensorSpec((2,), xlgraph.float32))
        with pytest.raises(xlgraph.errors.AutodiffError, match="add_"):
            autodiff(graph)


def test_gradient_through_nested_conditionals() -> None:
    def outer_then(c: xlgraph.Tensor, x: xlgraph.Tensor) -> xlgraph.Tensor:
        a = ir.create_graph(ops.sin, x)
        b = ir.create_graph(lambda t: t * t, x)
        return ops.conditional(c, a, b, [x], [x])[0] * 2.0

    def fwd(c1: xlgraph.Tensor, c2: xlgraph.Tensor, x: xlgraph.Tensor) -> xlgraph.Tensor:
        g1 = ir.create_graph(outer_then, c2, x)
        g2 = ir.create_graph(ops.exp, x)
        return ops.conditional(c1, g1, g2, [c2, x], [x])[0]

    ir = xlgraph.Ir()
    with ir.main_graph:
        flag = xlgraph.TensorSpec((), xlgraph.bool)
        graph = ir.create_graph(fwd, flag, flag, xlgraph.TensorSpec((3,), xlgraph.float64))
        info = autodiff(graph, grads_required=[graph.inputs[2]])
        streams = [xlgraph.h2d_stream(t.shape, t.dtype, f"s{i}")
                   for i, t in enumerate(graph.inputs)]
        site = ops.call_with_info(graph, *[ops.host_load(s) for s in streams])
        (dx,) = ops.call(info.graph, xlgraph.constant(np.ones(3), xlgraph.float64),
                         inputs_dict=info.inputs_dict(site))
        out = xlgraph.d2h_stream(dx.shape, dx.dtype, "dx")
        ops.host_store(out, dx)
    x = np.array([0.3, -1.2, 2.0])
    for optimize in OPTIMIZE:
        session = xlgraph.Session(ir, optimize=optimize)
        with session:
            for c1, c2 in [(True, True), (True, False), (False, True)]:
                got = session.run({streams[0]: np.array(c1), streams[1]: np.array(c2),
                                   streams[2]: x})[out]
                want = (2 * np.cos(x) if c2 else 4 * x) if c1 else np.exp(x)
                np.testing.assert_allclose(got, want, rtol=1e-12)
