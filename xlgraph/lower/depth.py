"""Deeply nested programs: call cycles found without recursion, generated code kept within
Python's static limits.

Calls, repeats and conditionals nest graphs. Every pass over them (flattening, the plan, the
interpreter, the listings) walks with an explicit stack (``xlgraph.core.trampoline``), so the
nesting a program may have is bounded by memory, not by Python's recursion limit, which nothing
changes. Generated code has static limits of its own: Python refuses more than
``MAX_COMPILED_LOOPS`` nested loops, or about 100 levels of indentation, in one function. The
flattening makes a function of every loop body or branch arm nested deeper than
``flatten.MAX_NESTED_BLOCKS``; one that cannot be a function (by-reference inputs, host
transfers inside) stays inline, and ``check_compiled_loops`` refuses the program when it would
pass those limits.
"""

from __future__ import annotations

from xlgraph.errors import CallCycleError, LimitError
from xlgraph.graph import Graph
from xlgraph.ir import Ir
from xlgraph.lower.program import Step

MAX_COMPILED_LOOPS = 20  # Python's limit on statically nested blocks in one function
MAX_COMPILED_BLOCKS = 90  # loops and branches nested in one function (indentation: 100)


def graph_depth(ir: Ir) -> int:
    """Levels of graphs below and including the main graph (1 when nothing is called)."""
    depth: dict[Graph, int] = {}
    path: list[Graph] = []  # the graphs being measured, each calling the next
    on_path: set[Graph] = set()
    stack: list[tuple[Graph, bool]] = [(ir.main_graph, False)]
    while stack:
        graph, callees_done = stack.pop()
        if graph in depth:
            continue
        callees = [g for op in graph.ops for g in op.called_graphs]
        if callees_done:
            depth[graph] = 1 + max((depth[g] for g in callees), default=0)
            on_path.discard(path.pop())
        elif graph in on_path:  # ``ops.call`` refuses cycles; this catches ops built otherwise
            cycle = [*path[path.index(graph):], graph]
            hops = "; ".join(_hop(a, b) for a, b in zip(cycle, cycle[1:]))
            raise CallCycleError(f"the program's graphs call each other in a cycle: {hops}. A "
                                 f"graph cannot call itself, directly or through other graphs")
        else:
            path.append(graph)
            on_path.add(graph)
            stack.append((graph, True))
            stack.extend((g, False) for g in callees if g not in depth)
    return depth[ir.main_graph]


def _hop(caller: Graph, callee: Graph) -> str:
    op = next(op for op in caller.ops if callee in op.called_graphs)
    return f"{caller.name!r} calls {callee.name!r} ({op.defn.name} at {op.created_at})"


def block_depth(steps: list[Step]) -> tuple[int, int]:
    """Deepest nesting in ``steps`` of loop steps, and of loop and cond steps (an explicit
    stack)."""
    loops = blocks = 0
    stack = [(s, 0, 0) for s in steps]
    while stack:
        s, outer_loops, outer_blocks = stack.pop()
        level = outer_loops + (s.kind == "loop")
        nested = outer_blocks + (s.kind in ("loop", "cond"))
        loops, blocks = max(loops, level), max(blocks, nested)
        stack.extend((inner, level, nested) for inner in s.body + s.orelse)
    return loops, blocks


def check_compiled_loops(bodies: dict[str, list[Step]]) -> None:
    """Raise ``LimitError`` when a generated function would nest more loops or blocks than
    Python compiles."""
    for name, steps in bodies.items():
        loops, blocks = block_depth(steps)
        if loops > MAX_COMPILED_LOOPS:
            raise LimitError(
                f"{name} nests {loops} repeat loops; generated Python code allows at most "
                f"{MAX_COMPILED_LOOPS}: use Session(..., optimize=False) for this program"
            )
        if blocks > MAX_COMPILED_BLOCKS:
            raise LimitError(
                f"{name} nests {blocks} repeats and conditionals; generated Python code allows "
                f"at most {MAX_COMPILED_BLOCKS}: use Session(..., optimize=False) for this program"
            )
