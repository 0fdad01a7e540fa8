"""Flatten an Ir into a ``Program``: calls are inlined, repeats become loop steps.

A subgraph that is large (many ops on small tensors), or called from several sites and not tiny,
is compiled once as its own function (a ``func`` step) instead of being inlined at every site,
provided it takes every input by value and makes no host transfers.
"""

from __future__ import annotations

import re

from xlgraph.core.trampoline import Nested, run
from xlgraph.graph import Graph
from xlgraph.ir import Ir
from xlgraph.lower.program import Function, Program, Step, walk
from xlgraph.op import Op
from xlgraph.ops.control import branch_of
from xlgraph.ops.half import half_form
from xlgraph.tensor import Tensor, TensorSpec

REPEATED_MIN_OPS = 16  # a graph called from >= 2 sites with at least this many ops is a function
LARGE_MIN_OPS = 400  # a graph with at least this many ops (counting callees) is a function,
# unless its ops' results average at least ``LARGE_INLINE_ELEMENTS`` elements: inline, its ops
# use the caller's layouts, fused segments and pool buffers (a function's parameters have no
# known layout and its results are fresh arrays), which pays where each op moves much data;
# where ops are many and small, compiling the segments costs more than it saves (a 12-layer
# transformer's backward pass at width 768: 10% of its step; an 800-layer MLP of width 8:
# Session 1.2 -> 7.9 s of CPU with the segments compiled)
LARGE_INLINE_ELEMENTS = 1 << 14
# Compiled functions call each other on Python's stack at run time: no call chain is deeper
# than this (within the default recursion limit of 1000); graphs nested deeper are inlined into
# the innermost function. Functions made only for their size stop at ``SIZE_FUNCTION_DEPTH``; the
# rest of the chain is kept for graphs called from several sites and for bodies nested too deep
# to inline (``MAX_NESTED_BLOCKS``).
MAX_FUNCTION_DEPTH = 400
SIZE_FUNCTION_DEPTH = 32
# Loop bodies and branch arms nested in one generated function (Python allows 20 nested loops
# and 100 levels of indentation); a body nested deeper becomes a function of its own.
MAX_NESTED_BLOCKS = 16


def graph_size(graph: Graph, memo: dict[Graph, int]) -> int:
    """Number of ops in ``graph``, counting the ops of the graphs it calls."""
    return run(_size(graph, memo))


def _size(graph: Graph, memo: dict[Graph, int]) -> Nested[int]:
    if graph not in memo:
        memo[graph] = 0  # guards against cycles
        total = 0
        for op in graph.ops:
            total += 1
            for g in op.called_graphs:
                total += memo[g] if g in memo else (yield _size(g, memo))
        memo[graph] = total
    return memo[graph]


def _mean_elements(graph: Graph) -> float:
    """The mean number of elements of the results of ``graph``'s own ops."""
    sizes = [t.nelms for op in graph.ops for t in op.outputs]
    return sum(sizes) / max(len(sizes), 1)


def _self_contained(graph: Graph, modified: set[int], memo: dict[Graph, bool]) -> bool:
    """Whether ``graph`` can be a function at a site marking inputs ``modified``: every input
    by value, no host transfers in it or the graphs it calls (``memo`` keeps the latter)."""
    if modified or any(t.by_ref for t in graph.inputs):
        return False
    if graph not in memo:
        seen, stack, found = {graph}, [graph], False
        while stack and not found:
            g = stack.pop()
            found = any(o.defn.kind in ("host_load", "host_store") for o in g.ops)
            fresh = [c for c in g.called_graphs if c not in seen]
            seen.update(fresh)
            stack.extend(fresh)
        memo[graph] = not found
    return memo[graph]


class _Flattener:
    def __init__(self) -> None:
        self.num_slots = 0
        self.variable_slots: dict[int, Tensor] = {}
        self.constant_slots: dict[int, Tensor] = {}
        self.specs: dict[int, TensorSpec] = {}
        self.functions: dict[tuple[Graph, int], Function] = {}
        self.sizes: dict[Graph, int] = {}
        self.contained: dict[Graph, bool] = {}
        self.depth = 0  # functions around the body being flattened
        self.blocks = 0  # loop bodies and branch arms around it, inside its function
        self.heights: dict[Graph, int] = {}  # graph -> the tallest function made of it

    def new_slot(self, spec: TensorSpec) -> int:
        self.num_slots += 1
        self.specs[self.num_slots - 1] = spec
        return self.num_slots - 1

    def graph(self, graph: Graph, env: dict[Tensor, int], steps: list[Step]) -> Nested[None]:
        for c in graph.constants:
            env[c] = self.new_slot(c.spec)
            self.constant_slots[env[c]] = c
            steps.append(Step("const", [], [env[c]], value=c.data))
        for op in graph.ops:
            ins = [env[t] for t in op.inputs]
            kind = op.defn.kind
            if kind == "call":
                outs = yield self.call(op, ins, steps)
            elif kind == "repeat":
                outs = yield self.loop(op, ins, steps)
            elif kind == "conditional":
                outs = yield self.branch(op, ins, steps)
            else:
                outs = [self.new_slot(t.spec) for t in op.outputs]
                steps.append(Step(kind, ins, outs, op, half_form(
                    op.defn, [t.spec for t in op.inputs], [t.spec for t in op.outputs]),
                    op.attrs))
            env.update(zip(op.outputs, outs))

    def bind_inputs(self, op: Op, ins: list[int], steps: list[Step]) -> dict[Tensor, int]:
        """Slots for the called graph's inputs: shared when by reference, else a ``bind``."""
        return self.bind(op, op.attrs["graph"], ins, op.attrs["modified"], steps)

    def bind(self, op: Op | None, graph: Graph, ins: list[int], modified: set[int],
             steps: list[Step]) -> dict[Tensor, int]:
        """``bind_inputs`` for ``graph`` fed by ``ins``; ``modified`` indexes its inputs."""
        env: dict[Tensor, int] = {}
        for i, (t, slot) in enumerate(zip(graph.inputs, ins)):
            if t.by_ref or i in modified:
                env[t] = slot
            else:
                env[t] = self.new_slot(t.spec)
                steps.append(Step("bind", [slot], [env[t]], op))
        return env

    def as_function(self, graph: Graph, modified: set[int], nested: bool = False) -> bool:
        """Whether a site of ``graph`` calls it as a function rather than inlining it: when it
        is large (``LARGE_MIN_OPS``, of small tensors), or called from several sites (branches
        included) and not tiny. So a graph
        lowers once however many sites call it (nested conditionals whose arms call one graph
        stay linear, not exponential, in the nesting). Not when the call chain at run time
        would grow deeper than ``MAX_FUNCTION_DEPTH``. Always (when it can be) for a loop body
        or branch arm nested ``MAX_NESTED_BLOCKS`` deep in its function (``nested``)."""
        size = graph_size(graph, self.sizes)
        repeated = len(graph.call_sites) > 1 and size >= REPEATED_MIN_OPS
        height = self.heights.get(graph, 1)
        if repeated or (nested and self.blocks >= MAX_NESTED_BLOCKS):
            limit = MAX_FUNCTION_DEPTH
        elif size >= LARGE_MIN_OPS and _mean_elements(graph) < LARGE_INLINE_ELEMENTS:
            limit = SIZE_FUNCTION_DEPTH
        else:
            return False
        return self.depth + height <= limit and _self_contained(graph, modified, self.contained)

    def func_step(self, op: Op, graph: Graph, ins: list[int], steps: list[Step],
                  ) -> Nested[list[int]]:
        fn = yield self.function(graph, len(op.outputs))
        outs = [self.new_slot(t.spec) for t in op.outputs]
        steps.append(Step("func", ins, outs, op, func=fn))
        return outs

    def call(self, op: Op, ins: list[int], steps: list[Step]) -> Nested[list[int]]:
        graph: Graph = op.attrs["graph"]
        if not self.as_function(graph, op.attrs["modified"]):
            return (yield self.inline(op, ins, steps))
        return (yield self.func_step(op, graph, ins, steps))

    def function(self, graph: Graph, n_out: int) -> Nested[Function]:
        key = (graph, n_out)
        if key not in self.functions:
            params = [self.new_slot(t.spec) for t in graph.inputs]
            steps: list[Step] = []
            env = self.bind(None, graph, params, set(), steps)
            outer_blocks, self.blocks = self.blocks, 0
            self.depth += 1
            yield self.graph(graph, env, steps)
            self.depth -= 1
            self.blocks = outer_blocks
            name = f"f{len(self.functions)}_{re.sub(r'[^0-9a-zA-Z_]', '_', graph.name)}"
            results = [env[t] for t in graph.outputs[:n_out]]
            height = 1 + max((s.func.height for s in walk(steps) if s.kind == "func"), default=0)
            self.functions[key] = Function(name, params, steps, results, height=height)
            self.heights[graph] = max(self.heights.get(graph, 1), height)
        return self.functions[key]

    def inline(self, op: Op, ins: list[int], steps: list[Step]) -> Nested[list[int]]:
        graph: Graph = op.attrs["graph"]
        env = self.bind_inputs(op, ins, steps)
        yield self.graph(graph, env, steps)
        return [env[t] for t in graph.outputs[: len(op.outputs)]]

    def loop(self, op: Op, ins: list[int], steps: list[Step]) -> Nested[list[int]]:
        graph: Graph = op.attrs["graph"]
        env = self.bind_inputs(op, ins, steps)
        for t, slot in zip(graph.inputs, ins[: len(graph.outputs)]):
            if env[t] == slot:  # by reference: the carry must not rebind the caller's slot
                env[t] = self.new_slot(t.spec)
                steps.append(Step("ref", [slot], [env[t]], op))
        body: list[Step] = []
        # the body inline, as always, unless it would nest too deep: then a function call
        deep = self.blocks >= MAX_NESTED_BLOCKS
        if deep and self.as_function(graph, op.attrs["modified"], nested=True):
            fn = yield self.function(graph, len(graph.outputs))
            results = [self.new_slot(t.spec) for t in graph.outputs]
            body.append(Step("func", [env[t] for t in graph.inputs], results, op, func=fn))
        else:
            self.blocks += 1
            yield self.graph(graph, env, body)
            self.blocks -= 1
            results = [env[t] for t in graph.outputs]
        carried = [(env[graph.inputs[i]], r) for i, r in enumerate(results)]
        steps.append(Step("loop", [], [], op, body=body, count=op.attrs["count"], carried=carried))
        return results[: len(op.outputs)]

    def branch(self, op: Op, ins: list[int], steps: list[Step]) -> Nested[list[int]]:
        """A ``cond`` step; each body binds its branch's inputs and runs its graph."""
        bodies: list[list[Step]] = []
        results: list[list[int]] = []
        for then_branch in (True, False):
            graph, feeds, modified = branch_of(op, then_branch)
            body: list[Step] = []
            if self.as_function(graph, modified, nested=True):
                results.append((yield self.func_step(op, graph, ins[feeds], body)))
            else:
                env = self.bind(op, graph, ins[feeds], modified, body)
                self.blocks += 1
                yield self.graph(graph, env, body)
                self.blocks -= 1
                results.append([env[t] for t in graph.outputs[: len(op.outputs)]])
            bodies.append(body)
        outs = [self.new_slot(t.spec) for t in op.outputs]
        steps.append(Step("cond", ins[:1], outs, op, body=bodies[0], orelse=bodies[1],
                          carried=list(zip(*results)), copy_out=True))
        return outs


def flatten(ir: Ir) -> Program:
    """The main graph of ``ir`` as a flat ``Program``."""
    f = _Flattener()
    env: dict[Tensor, int] = {}
    for v in ir.main_graph.variables:
        slot = f.new_slot(v.spec)
        f.variable_slots[slot] = v
        env[v] = slot
    steps: list[Step] = []
    run(f.graph(ir.main_graph, env, steps))
    return Program(steps, f.num_slots, f.variable_slots, f.constant_slots, f.specs,
                   list(f.functions.values()))
