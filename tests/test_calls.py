"""Calls, CallSiteInfo, pass-by-value vs by-reference, repeat, and call-site errors."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import errors, ops


def fetch(ir: popxl.Ir, tensors: list[popxl.Tensor], optimize: bool = True) -> list[np.ndarray]:
    with ir.main_graph:
        streams = [popxl.d2h_stream(t.shape, t.dtype, f"o{i}") for i, t in enumerate(tensors)]
        for s, t in zip(streams, tensors):
            ops.host_store(s, t)
    with popxl.Session(ir, optimize=optimize) as session:
        got = session.run()
    return [got[s] for s in streams]


def increment(x: popxl.Tensor) -> None:
    ops.var_updates.accumulate_(x, popxl.constant(1, x.dtype))


@pytest.mark.parametrize("optimize", [True, False])
@pytest.mark.parametrize(("mode", "expected"), [("value", 1), ("modified", 2), ("by_ref", 2)])
def test_pass_by_value_unless_marked(mode: str, expected: int, optimize: bool) -> None:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        a = popxl.variable(1, popxl.int32, name="a")
        if mode == "by_ref":
            graph = ir.create_graph(lambda: increment(popxl.graph_input((), popxl.int32, "x",
                                                                         by_ref=True)))
        else:
            graph = ir.create_graph(increment, a.spec)
        info = ops.call_with_info(graph, a)
        if mode == "modified":
            info.set_parent_input_modified(a)
        after = a + 0
    assert fetch(ir, [after], optimize)[0] == expected


def test_call_site_info_mappings() -> None:
    def fn(x, y):
        return x + y, x * y

    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones(3), name="a")
        b = popxl.variable(np.full(3, 2.0), name="b")
        graph = ir.create_graph(fn, a.spec, b.spec)
        info = ops.call_with_info(graph, a, inputs_dict={graph.inputs[1]: b})
        outs = ops.call(graph, b, a)
    assert info.called_graph is graph and isinstance(outs, tuple) and len(outs) == 2
    assert info.inputs == (a, b) and info.parent_input(1) is b
    assert info.graph_to_parent(graph.inputs[0]) is a
    assert info.graph_to_parent(graph.outputs[1]) is info.parent_output(1)
    assert info.parent_to_graph(b) is graph.inputs[1]
    assert info.graph_to_parent_input_index(1) == 1 and info.parent_to_graph_output_index(0) == 0
    s, p = fetch(ir, list(info.outputs))
    np.testing.assert_allclose(s, 3.0)
    np.testing.assert_allclose(p, 2.0)


def test_same_parent_tensor_for_two_inputs_and_scalar_coercion() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.full(2, 3.0), name="a")
        graph = ir.create_graph(lambda x, y: x * y, a.spec, a.spec)
        (sq,) = ops.call(graph, a, a)
        (scaled,) = ops.call(graph, a, np.full(2, 0.5))
    np.testing.assert_allclose(fetch(ir, [sq, scaled]), [[9.0, 9.0], [1.5, 1.5]])


def test_nested_calls_and_repeated_subgraph() -> None:
    def inner(x):
        return ops.exp(x)

    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.array([0.0, 1.0]), name="a")
        g_inner = ir.create_graph(inner, a.spec)

        def outer(x):
            (y,) = ops.call(g_inner, x)
            (z,) = ops.call(g_inner, y)
            return z

        g_outer = ir.create_graph(outer, a.spec)
        (r,) = ops.call(g_outer, a)
    np.testing.assert_allclose(fetch(ir, [r])[0], np.exp(np.exp([0.0, 1.0])), rtol=1e-6)
    assert g_outer.called_graphs == (g_inner,)


@pytest.mark.parametrize("optimize", [True, False])
def test_repeat_carries_outputs_into_inputs(optimize: bool) -> None:
    def body(x, k):
        return x * 2.0 + k

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.array([1.0, -1.0]), name="x")
        k = popxl.variable(np.array([0.5, 0.5]), name="k")
        graph = ir.create_graph(body, x.spec, k.spec)
        (y,) = ops.repeat(graph, 3, x, k)
    expected = np.array([1.0, -1.0])
    for _ in range(3):
        expected = expected * 2 + 0.5
    np.testing.assert_allclose(fetch(ir, [y], optimize)[0], expected)


def test_repeat_errors() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros(2), name="x")
        with pytest.raises(ValueError):
            ops.repeat(ir.create_graph(lambda a: a + 1, x.spec), 0, x)
        bad = ir.create_graph(lambda a: ops.reshape(a, (1, 2)), x.spec)
        with pytest.raises(errors.ShapeError, match="carried"):
            ops.repeat(bad, 2, x)


def test_call_input_errors_name_the_graph_and_input() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.zeros(2), name="a")
        other = popxl.variable(np.zeros(3), name="other")
        graph = ir.create_graph(lambda x, y: x + y, a.spec, a.spec)
        with pytest.raises(errors.CallInputError, match=r"missing inputs \['y'\]"):
            ops.call(graph, a)
        with pytest.raises(errors.CallInputError, match="given twice"):
            ops.call(graph, a, a, inputs_dict={graph.inputs[0]: a})
        with pytest.raises(errors.CallInputError, match="positional"):
            ops.call(graph, a, a, a)
        with pytest.raises(errors.CallInputError, match="not an input"):
            ops.call(graph, a, inputs_dict={a: a})
        with pytest.raises(errors.CallInputError, match=r"expects f32\[2\]"):
            ops.call(graph, a, other)
    sub = ir.create_empty_graph("caller")
    with sub, pytest.raises(errors.CallInputError, match="not from the calling graph"):
        ops.call(graph, a, a)


def test_no_implicit_capture() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.zeros(2), name="a")
    with pytest.raises(errors.GraphMismatchError, match="no implicit capture") as info:
        ir.create_graph(lambda x: x + a, a.spec)
    assert "test_calls.py" in str(info.value)
