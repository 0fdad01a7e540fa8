"""Deeply nested programs: measure the nesting without recursion, refuse what cannot run, and
give the recursive lowering passes and the interpreter the Python stack they need.

Calls, repeats and conditionals nest graphs. Lowering and the interpreter recurse once per
level, so a few hundred levels overflow Python's default recursion limit; they run under a
limit raised for the measured depth instead. The compiled path also turns each level of
nested ``repeat`` into a nested Python ``for`` loop, and Python refuses more than
``MAX_COMPILED_LOOPS`` of those in one function.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator

from xlgraph.errors import CallCycleError, LimitError
from xlgraph.graph import Graph
from xlgraph.ir import Ir
from xlgraph.lower.program import Step

MAX_DEPTH = 1000  # graph nesting levels; beyond this the C stack of a thread is at risk
MAX_COMPILED_LOOPS = 20  # Python's limit on statically nested blocks in one function
_FRAMES_PER_LEVEL = 16  # generous: the passes use a handful of frames per nesting level
_SHALLOW = 40  # programs this shallow run under the default limit

_lock = threading.Lock()
_holders = 0
_saved_limit = 0


def graph_depth(ir: Ir) -> int:
    """Levels of graphs below and including the main graph (1 when nothing is called)."""
    depth: dict[Graph, int] = {}
    path: list[Graph] = []  # the graphs being measured, each calling the next
    stack: list[tuple[Graph, bool]] = [(ir.main_graph, False)]
    while stack:
        graph, callees_done = stack.pop()
        if graph in depth:
            continue
        callees = [g for op in graph.ops for g in op.called_graphs]
        if callees_done:
            depth[graph] = 1 + max((depth[g] for g in callees), default=0)
            path.pop()
        elif graph in path:  # ``ops.call`` refuses cycles; this catches ops built otherwise
            cycle = [*path[path.index(graph):], graph]
            hops = "; ".join(_hop(a, b) for a, b in zip(cycle, cycle[1:]))
            raise CallCycleError(f"the program's graphs call each other in a cycle: {hops}. A "
                                 f"graph cannot call itself, directly or through other graphs")
        else:
            path.append(graph)
            stack.append((graph, True))
            stack.extend((g, False) for g in callees if g not in depth)
    return depth[ir.main_graph]


def _hop(caller: Graph, callee: Graph) -> str:
    op = next(op for op in caller.ops if callee in op.called_graphs)
    return f"{caller.name!r} calls {callee.name!r} ({op.defn.name} at {op.created_at})"


def check_depth(ir: Ir) -> int:
    """The graph depth of ``ir``; raises ``LimitError`` beyond ``MAX_DEPTH``."""
    depth = graph_depth(ir)
    if depth > MAX_DEPTH:
        raise LimitError(
            f"graphs are nested {depth} levels deep (calls, repeats and conditionals); "
            f"the simulator supports at most {MAX_DEPTH}"
        )
    return depth


def loop_depth(steps: list[Step]) -> int:
    """Deepest nesting of loop steps in ``steps`` (without recursion)."""
    deepest = 0
    stack = [(s, 0) for s in steps]
    while stack:
        s, outer = stack.pop()
        level = outer + (s.kind == "loop")
        deepest = max(deepest, level)
        stack.extend((inner, level) for inner in s.body + s.orelse)
    return deepest


def check_compiled_loops(bodies: dict[str, list[Step]]) -> None:
    """Raise ``LimitError`` when a generated function would nest too many loops."""
    for name, steps in bodies.items():
        depth = loop_depth(steps)
        if depth > MAX_COMPILED_LOOPS:
            raise LimitError(
                f"{name} nests {depth} repeat loops; generated Python code allows at most "
                f"{MAX_COMPILED_LOOPS}: use Session(..., optimize=False) for this program"
            )


_NO_CHANGE = contextlib.nullcontext()


def stack_for(depth: int) -> contextlib.AbstractContextManager[None]:
    """A context that runs its body with Python's recursion limit raised for ``depth`` nesting
    levels (no change for shallow programs)."""
    return _NO_CHANGE if depth <= _SHALLOW else _raised_limit(depth)


@contextlib.contextmanager
def _raised_limit(depth: int) -> Iterator[None]:
    global _holders, _saved_limit
    frames, frame = 0, sys._getframe()
    while frame is not None:
        frames, frame = frames + 1, frame.f_back
    with _lock:
        if _holders == 0:
            _saved_limit = sys.getrecursionlimit()
        _holders += 1
        sys.setrecursionlimit(max(sys.getrecursionlimit(),
                                  frames + 200 + _FRAMES_PER_LEVEL * depth))
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0:
                sys.setrecursionlimit(_saved_limit)
