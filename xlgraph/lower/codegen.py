"""Generate one Python function that runs a planned ``Program``; its source is kept for inspection.

Every slot gets a name in the generated code. Constants (``c``), pool buffers (``b``) and views
of them (``v``, computed once here) are globals of the function. Variables (``w``, and ``n`` for
the spare array a first write goes to, see ``plan.swap_writes``) and values that change from run
to run (host data, fresh arrays, views of them: ``s``) are locals. View and by-value binding
steps whose source is a global emit no code at all.

The source explains itself: a line that runs an op ends with a comment naming the op and its IR
tensors (``# %y:f32[8,32] = matmul %x %W``, prefixed by the subgraph's name when the op was
inlined from one), and a header lists the constants and the views of fixed arrays it uses.

With ``fuse`` and a backend that compiles (numba), runs of consecutive compiled loop calls and
2-D matrix products become one compiled function each (a *segment*, ``lower.segments``): one
call instead of one per op. Views (which read no data) made between them move before the
segment's call. The segments' source follows the step's, in comments.

User text never becomes code: names reach the source only inside comments, escaped by
``annotate.comment``; string attributes appear as ``repr`` literals; attribute names that are not
plain identifiers are passed as a bound dict. No line of the source may hold a character that is
not printable (checked before it is compiled), so a name can never end a line and start code.

The writer is built in layers, one module each: ``codegen_writer.py`` (names and lines),
``codegen_statements.py`` (straight-line steps), ``codegen_chains.py`` (an Adam update's steps
as one compiled loop), ``codegen_loops.py`` (loops and branches) and this module (function
bodies, the ``step`` function, compiling it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from xlgraph.lower import annotate
from xlgraph.lower.backends import Backend
from xlgraph.lower.codegen_loops import Loops
from xlgraph.lower.codegen_writer import dense
from xlgraph.lower.plan import Plan
from xlgraph.lower.program import Function, Program, Step
from xlgraph.op import Op

__all__ = ["CompiledStep", "generate", "failing_op", "dense"]

_FILENAME = "<xlgraph-step>"


@dataclass(eq=False)
class CompiledStep:
    """The generated function ``fn(IN, OUT, V, N)`` and what is needed to explain its failures."""

    fn: Callable[..., None]
    source: str
    line_ops: dict[int, Op]
    loops: int = 0  # steps with a loop form that applies (compiled when a backend was given)
    undo: list[Any] | None = None  # the regions a run overwrote (``lower.undo``), if any


class _Writer(Loops):
    """The whole generated step: compiled functions' bodies, then the ``step`` function."""

    def transfer_indices(self) -> None:
        """Index host transfers by a loop variable where a stream has one site, in one loop;
        other sites count their transfers at run time."""
        if self.transfers == 1:
            return
        sites: dict[str, list[tuple[Step, list[Step | None]]]] = {}

        def visit(steps: list[Step], loops: list[Step | None]) -> None:
            for s in steps:
                if s.kind in ("host_load", "host_store"):
                    sites.setdefault(self.counter_name(s), []).append((s, loops))
                visit(s.body, [*loops, s if s.kind == "loop" else None])
                visit(s.orelse, [*loops, None])

        visit(self.program.steps, [])
        for name, found in sites.items():
            (x, loops), single = found[0], len(found) == 1
            if single and not loops:
                self.index[x] = "[0]"
            elif single and len(loops) == 1 and loops[0] is not None:
                var = self.loop_vars.setdefault(loops[0], f"t{len(self.loop_vars)}")
                mod = f" % {self.transfers}" if loops[0].count > self.transfers else ""
                self.index[x] = f"[{var}{mod}]"
            else:
                self.counters.append(name)

    def function(self, fn: Function) -> None:
        self.plan = self.plans[fn]
        for p in fn.params:
            self.names[p] = f"s{p}"
        self.emit(0, f"def {fn.name}({', '.join(f's{p}' for p in fn.params)}):")
        self.body_chains(fn.steps)
        for s in fn.steps:
            self.step(s, 1)
        results, seen, params = [], {}, set(fn.params)
        for r in fn.results:
            name, root = self.names[r], self.plan.root[r]
            fresh = not self.is_static(r) and root not in params and r not in self.plan.viewish
            if seen.get(root, r) != r or not fresh:
                name = f"np.array({name})"
            seen.setdefault(root, r)
            results.append(name)
        self.emit(1, f"return ({''.join(x + ', ' for x in results)})")
        self.emit(0, "")

    def source(self) -> str:
        for fn in self.program.functions:
            self.function(fn)
        self.plan = self.plans[self.program]
        self.transfer_indices()
        self.emit(0, "def step(IN, OUT, V, N):")
        if self.program.variable_slots:
            names = ", ".join(f"%{v.name}" for v in self.program.variable_slots.values())
            slots = "".join(f"w{v}, " for v in self.program.variable_slots)
            self.emit(1, f"{slots}= V", note=names)
        if self.swaps:
            self.emit(1, f"{''.join(f'n{v}, ' for v in sorted(self.swaps.values()))}= N")
        for counter in self.counters:
            self.emit(1, f"{counter} = 0")
        self.body_chains(self.program.steps)
        for s in self.program.steps:
            self.step(s, 1)
        self.emit(1, "return None")
        header = annotate.header(self.lines, self.globals_made)
        self.line_ops = {line + len(header): op for line, op in self.line_ops.items()}
        lines = header + self.lines + self.segments.comments()
        if not all(line.isprintable() for line in lines):
            raise AssertionError("a generated line holds a line break or another non-printable "
                                 "character: a name reached it unescaped (please report this)")
        return "\n".join(lines) + "\n"


def generate(program: Program, plans: dict[Program | Function, Plan],
             buffers: list[np.ndarray], swaps: dict[Step, int], h2d: list[Any], d2h: list[Any],
             transfers: int, backend: Backend | None = None,
             arrays: list[np.ndarray] = (), fuse: bool = False,
             logged: set[Step] = frozenset()) -> CompiledStep:
    """Compile ``program`` into a Python function ``step(IN, OUT, V, N)``.

    ``plans`` maps each body (the program and each function) to its buffer plan and
    ``buffers`` are the pool arrays (bound into the function). ``IN``/``OUT`` are the host
    arrays of the h2d/d2h streams in the given order, ``V`` the variables' device arrays (in
    ``program.variable_slots`` order) and ``N`` the spare arrays of the variables in ``swaps``
    (``{step: variable slot}``, in slot order), which those steps write instead. With a
    ``backend``, steps whose op has a loop form call its compiled version instead; ``arrays``
    (the variables' device arrays, as ``V``) lets calls on variables skip its type dispatch;
    ``fuse`` runs consecutive compiled calls as segments (see the module docstring);
    ``logged`` steps save the regions they overwrite in the list ``CompiledStep.undo``
    (``lower.undo``).
    """
    writer = _Writer(program, plans, buffers, swaps, h2d, d2h, transfers, backend, arrays,
                     fuse, logged)
    source = writer.source()
    code = compile(source, _FILENAME, "exec")
    namespace = writer.namespace
    exec(code, namespace)  # noqa: S102 - generated from the Ir; names only in escaped comments
    return CompiledStep(namespace["step"], source, writer.line_ops, writer.loops,
                        namespace.get("UNDO"))


def failing_op(compiled: CompiledStep, exc: BaseException) -> Op | None:
    """The op whose generated line raised ``exc``, if the traceback passes through it."""
    tb = exc.__traceback__
    op = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == _FILENAME:
            op = compiled.line_ops.get(tb.tb_lineno, op)
        tb = tb.tb_next
    return op
