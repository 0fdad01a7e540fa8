"""Executables: the compiled plan and the reference interpreter behind one interface."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from xlgraph.ir import Ir
from xlgraph.lower.alias import plan_copies
from xlgraph.lower.checks import check_inplace_order
from xlgraph.lower.codegen import failing_op, generate
from xlgraph.lower.flatten import flatten
from xlgraph.lower.interpreter import Interpreter
from xlgraph.op import Op
from xlgraph.tensor import Variable


class Executable(Protocol):
    """``run`` executes the main graph once on the given variable and host arrays."""

    variables: list[Variable]
    source: str
    written_variables: list[Variable]

    def run(self, variables: list[np.ndarray], inputs: list[np.ndarray],
            outputs: list[np.ndarray]) -> None: ...

    def failing_op(self, exc: BaseException) -> Op | None: ...


class CompiledExecutable:
    """The generated step function."""

    def __init__(self, ir: Ir) -> None:
        program = flatten(ir)
        plan_copies(program)
        self.variables = list(program.variable_slots.values())
        self.h2d = list(ir.h2d_streams)
        self.d2h = list(ir.d2h_streams)
        self.constants = {slot: c.data for slot, c in program.constant_slots.items()}
        self.compiled = generate(program, self.h2d, self.d2h, ir.num_host_transfers)
        self.source = self.compiled.source
        written = {program.variable_slots[s] for s in _written_slots(program)}
        self.written_variables = [v for v in self.variables if v in written]

    def run(self, variables: list[np.ndarray], inputs: list[np.ndarray],
            outputs: list[np.ndarray]) -> None:
        self.compiled.fn(variables, inputs, outputs, self.constants)

    def failing_op(self, exc: BaseException) -> Op | None:
        return failing_op(self.compiled, exc)


def _written_slots(program: Any) -> set[int]:
    """Variable slots that some step writes in place, directly or through aliases."""
    parent: dict[int, int] = {}
    writes: list[int] = []
    for s in program.walk():
        if s.kind == "bind" or (s.kind == "kernel" and s.defn.inplace_of is not None):
            src = s.ins[0] if s.kind == "bind" else s.ins[s.defn.inplace_of]
            parent[s.outs[0]] = src
        if s.modifies is not None:
            writes.append(s.modifies)
    roots = set()
    for slot in writes:
        while slot in parent:
            slot = parent[slot]
        roots.add(slot)
    return roots & set(program.variable_slots)


class InterpretedExecutable:
    """The reference interpreter (``optimize=False``)."""

    source = "# optimize=False: the graph is interpreted op by op; no generated source\n"

    def __init__(self, ir: Ir) -> None:
        self.ir = ir
        self.variables = list(ir.main_graph.variables)
        self.written_variables = list(self.variables)
        self.h2d = list(ir.h2d_streams)
        self.d2h = list(ir.d2h_streams)
        self.interpreter = Interpreter(ir)

    def run(self, variables: list[np.ndarray], inputs: list[np.ndarray],
            outputs: list[np.ndarray]) -> None:
        self.interpreter.current_op = None
        self.interpreter.run(
            dict(zip(self.variables, variables)), dict(zip(self.h2d, inputs)),
            dict(zip(self.d2h, outputs)),
        )

    def failing_op(self, exc: BaseException) -> Op | None:
        return self.interpreter.current_op


def lower(ir: Ir, optimize: bool = True) -> CompiledExecutable | InterpretedExecutable:
    """Check ``ir`` and build its executable (compiled, or interpreted when not ``optimize``)."""
    check_inplace_order(ir)
    return CompiledExecutable(ir) if optimize else InterpretedExecutable(ir)
