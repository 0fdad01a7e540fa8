"""Flatten an Ir into a ``Program``: calls are inlined, repeats become loop steps."""

from __future__ import annotations

from xlgraph.graph import Graph
from xlgraph.ir import Ir
from xlgraph.lower.program import Program, Step
from xlgraph.op import Op
from xlgraph.tensor import Tensor


class _Flattener:
    def __init__(self) -> None:
        self.num_slots = 0
        self.variable_slots: dict[int, Tensor] = {}
        self.constant_slots: dict[int, Tensor] = {}
        self.constant_of: dict[Tensor, int] = {}

    def new_slot(self) -> int:
        self.num_slots += 1
        return self.num_slots - 1

    def graph(self, graph: Graph, env: dict[Tensor, int], steps: list[Step]) -> None:
        for c in graph.constants:
            if c not in self.constant_of:
                self.constant_of[c] = self.new_slot()
                self.constant_slots[self.constant_of[c]] = c
            env[c] = self.constant_of[c]
        for op in graph.ops:
            ins = [env[t] for t in op.inputs]
            kind = op.defn.kind
            if kind == "call":
                outs = self.inline(op, ins, steps)
            elif kind == "repeat":
                outs = self.loop(op, ins, steps)
            else:
                outs = [self.new_slot() for _ in op.outputs]
                steps.append(Step(kind, ins, outs, op, op.defn, op.attrs))
            env.update(zip(op.outputs, outs))

    def bind_inputs(self, op: Op, ins: list[int], steps: list[Step]) -> dict[Tensor, int]:
        """Slots for the called graph's inputs: shared when by reference, else a ``bind``."""
        env: dict[Tensor, int] = {}
        for i, (t, slot) in enumerate(zip(op.attrs["graph"].inputs, ins)):
            if t.by_ref or i in op.attrs["modified"]:
                env[t] = slot
            else:
                env[t] = self.new_slot()
                steps.append(Step("bind", [slot], [env[t]], op))
        return env

    def inline(self, op: Op, ins: list[int], steps: list[Step]) -> list[int]:
        graph: Graph = op.attrs["graph"]
        env = self.bind_inputs(op, ins, steps)
        self.graph(graph, env, steps)
        return [env[t] for t in graph.outputs[: len(op.outputs)]]

    def loop(self, op: Op, ins: list[int], steps: list[Step]) -> list[int]:
        graph: Graph = op.attrs["graph"]
        env = self.bind_inputs(op, ins, steps)
        body: list[Step] = []
        self.graph(graph, env, body)
        carried = [(env[graph.inputs[i]], env[t]) for i, t in enumerate(graph.outputs)]
        steps.append(Step("loop", [], [], op, body=body, count=op.attrs["count"], carried=carried))
        return [env[t] for t in graph.outputs[: len(op.outputs)]]


def flatten(ir: Ir) -> Program:
    """The main graph of ``ir`` as a flat ``Program``."""
    f = _Flattener()
    env: dict[Tensor, int] = {}
    for v in ir.main_graph.variables:
        slot = f.new_slot()
        f.variable_slots[slot] = v
        env[v] = slot
    steps: list[Step] = []
    f.graph(ir.main_graph, env, steps)
    return Program(steps, f.num_slots, f.variable_slots, f.constant_slots)
