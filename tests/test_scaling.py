"""Building and lowering stay linear: shared graphs lower once, names come from counters.

Not timed tests: each checks the structure that keeps the work linear (how many times a graph
is lowered, how names are made), so a regression fails whatever the machine's load.
"""

from __future__ import annotations

import numpy as np

import xlgraph
from xlgraph import ops
from xlgraph.lower.flatten import flatten


def _nested_conditionals(depth: int) -> tuple[xlgraph.Ir, object, object]:
    """``depth`` levels of conditionals whose two arms call the same graph of the level below:
    2**depth paths through the program."""
    ir = xlgraph.Ir()
    spec = xlgraph.TensorSpec((4,), xlgraph.float32)
    with ir.main_graph:
        graph = ir.create_graph(lambda x: x * 2.0 + 1.0, spec)
        for level in range(depth):
            def node(p: xlgraph.Tensor, x: xlgraph.Tensor, inner=graph, level=level):  # noqa: ANN001, ANN202
                args = [x] if level == 0 else [p, x]
                (y,) = ops.conditional(p, inner, inner, args, args)
                return y + 1.0
            graph = ir.create_graph(node, xlgraph.TensorSpec((), xlgraph.bool), spec)
        x_s = xlgraph.h2d_stream((4,), xlgraph.float32, "x")
        (out,) = ops.call(graph, xlgraph.constant(True), ops.host_load(x_s))
        y_s = xlgraph.d2h_stream((4,), xlgraph.float32, "y")
        ops.host_store(y_s, out)
    return ir, x_s, y_s


def test_a_graph_called_from_both_arms_of_21_nested_conditionals_lowers_once() -> None:
    depth = 21
    ir, x_s, y_s = _nested_conditionals(depth)
    program = flatten(ir)
    # each level's graph is lowered once (as a function or inline), not once per path
    steps = sum(1 for fn in program.functions for _ in fn.steps) + len(program.steps)
    assert steps < 40 * depth
    with xlgraph.Session(ir) as session:
        y = session.run({x_s: np.ones(4, np.float32)})[y_s]
    np.testing.assert_array_equal(y, np.full(4, 3.0 + depth, np.float32))


def test_unique_names_keep_their_counters_per_base_name() -> None:
    ir = xlgraph.Ir()
    with ir.main_graph:
        x = xlgraph.variable(np.ones(3, np.float32), name="x")
        made = [ops.add(x, x) for _ in range(5)]
        other = xlgraph.variable(np.ones(3, np.float32), name="add__t1")  # a taken suffix
        more = ops.add(x, x)
    assert [t.name for t in made] == ["add", "add__t0", "add__t1", "add__t2", "add__t3"]
    assert other.name == "add__t1__t0"
    assert more.name == "add__t4"
    assert ir.main_graph._suffixes["add"] == 5  # the next suffix to try, not a rescan
