"""Generate one Python function that runs a ``Program``; its source is kept for inspection."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from xlgraph.lower.program import Program, Step
from xlgraph.op import Op

_FILENAME = "<xlgraph-step>"


@dataclass(eq=False)
class CompiledStep:
    """The generated function ``fn(V, IN, OUT)`` and what is needed to explain its failures."""

    fn: Callable[[list[np.ndarray], list[np.ndarray], list[np.ndarray]], None]
    source: str
    line_ops: dict[int, Op]


class _Writer:
    def __init__(self, program: Program, h2d: list[Any], d2h: list[Any], transfers: int) -> None:
        self.program = program
        self.h2d = {s: i for i, s in enumerate(h2d)}
        self.d2h = {s: i for i, s in enumerate(d2h)}
        self.transfers = transfers
        self.lines: list[str] = []
        self.line_ops: dict[int, Op] = {}
        self.namespace: dict[str, Any] = {"np": np}
        self.kernels: dict[tuple[int, int], str] = {}

    def emit(self, indent: int, text: str, op: Op | None = None) -> None:
        self.lines.append("    " * indent + text)
        if op is not None:
            self.line_ops[len(self.lines)] = op

    def kernel_name(self, step: Step) -> str:
        key = (id(step.defn), id(step.attrs))
        if key not in self.kernels:
            name = f"k{len(self.kernels)}_{step.defn.name}"
            fn = step.defn.kernel
            self.namespace[name] = functools.partial(fn, **step.attrs) if step.attrs else fn
            self.kernels[key] = name
        return self.kernels[key]

    def counter(self, kind: str, index: int) -> str:
        return f"{kind}{index}_i"

    def step(self, s: Step, indent: int) -> None:
        copy = ".copy()" if s.copy_out else ""
        outs = ", ".join(f"s{o}" for o in s.outs)
        if s.kind == "kernel":
            call = f"{self.kernel_name(s)}({', '.join(f's{i}' for i in s.ins)})"
            self.emit(indent, f"{outs} = {call}{copy}" if outs else call, s.op)
        elif s.kind == "bind":
            self.emit(indent, f"{outs} = s{s.ins[0]}{copy}", s.op)
        elif s.kind == "host_load":
            i = self.h2d[s.attrs["stream"]]
            if self.transfers == 1:
                self.emit(indent, f"{outs} = IN[{i}]{copy}", s.op)
            else:
                c = self.counter("h", i)
                self.emit(indent, f"{outs} = IN[{i}][{c} % {self.transfers}]{copy}", s.op)
                self.emit(indent, f"{c} += 1")
        elif s.kind == "host_store":
            i = self.d2h[s.attrs["stream"]]
            if self.transfers == 1:
                self.emit(indent, f"OUT[{i}][...] = s{s.ins[0]}", s.op)
            else:
                c = self.counter("d", i)
                self.emit(indent, f"OUT[{i}][{c} % {self.transfers}] = s{s.ins[0]}", s.op)
                self.emit(indent, f"{c} += 1")
        elif s.kind == "loop":
            self.emit(indent, f"for _ in range({s.count}):", s.op)
            for inner in s.body:
                self.step(inner, indent + 1)
            if s.carried:
                dst = ", ".join(f"s{d}" for d, _ in s.carried)
                src = ", ".join(f"s{r}" for _, r in s.carried)
                self.emit(indent + 1, f"{dst} = {src}")
            else:
                self.emit(indent + 1, "pass")
        else:
            raise NotImplementedError(f"no code generation for step kind {s.kind!r}")

    def function(self) -> str:
        self.emit(0, "def step(V, IN, OUT, C):")
        for i, slot in enumerate(self.program.variable_slots):
            self.emit(1, f"s{slot} = V[{i}]")
        for slot in self.program.constant_slots:
            copy = ".copy()" if slot in self.program.copy_constants else ""
            self.emit(1, f"s{slot} = C[{slot}]{copy}")
        if self.transfers > 1:
            for i in range(len(self.h2d)):
                self.emit(1, f"{self.counter('h', i)} = 0")
            for i in range(len(self.d2h)):
                self.emit(1, f"{self.counter('d', i)} = 0")
        for s in self.program.steps:
            self.step(s, 1)
        self.emit(1, "return None")
        return "\n".join(self.lines) + "\n"


def generate(program: Program, h2d: list[Any], d2h: list[Any], transfers: int) -> CompiledStep:
    """Compile ``program`` into a Python function ``step(V, IN, OUT, C)``.

    ``V`` lists the variable arrays (updated in place), ``IN``/``OUT`` the host arrays of the
    h2d/d2h streams in the given order, ``C`` maps constant slots to their arrays.
    """
    writer = _Writer(program, h2d, d2h, transfers)
    source = writer.function()
    code = compile(source, _FILENAME, "exec")
    namespace = writer.namespace
    exec(code, namespace)  # noqa: S102 - the source is generated from the Ir, not user text
    return CompiledStep(namespace["step"], source, writer.line_ops)


def failing_op(compiled: CompiledStep, exc: BaseException) -> Op | None:
    """The op whose generated line raised ``exc``, if the traceback passes through it."""
    tb = exc.__traceback__
    op = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == _FILENAME:
            op = compiled.line_ops.get(tb.tb_lineno, op)
        tb = tb.tb_next
    return op
