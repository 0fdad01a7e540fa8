"""The generated step's writer: names for slots and globals, and the lines with their comments.

``codegen.py`` describes the generated code. ``Writer`` holds what a body's code is written
from (the program, its buffer plan, the pool and variable arrays) and what it has written so
far (lines, the names every slot has, the function's globals); ``codegen_statements.py``,
``codegen_loops.py`` and ``codegen.py`` add the statements, loops and function bodies on top.
"""

from __future__ import annotations

import keyword
import re
from typing import Any

import numpy as np

from xlgraph.lower import annotate
from xlgraph.lower.backends import Backend
from xlgraph.lower.plan import Plan
from xlgraph.lower.program import Function, Program, Step, walk
from xlgraph.lower.segments import Segments
from xlgraph.op import Op

__all__ = ["Writer", "dense", "call_text"]

_LITERALS = (bool, int, float, str, type(None))


def dense(a: np.ndarray) -> np.ndarray:
    """``a`` if it is contiguous, else a dense copy in its own axis order: exactly the layout
    the interpreter's copy of a view has (so kernels see the same strides on both paths)."""
    return a if a.flags.c_contiguous or a.flags.f_contiguous else np.array(a)


def call_text(fn: str, args: list[str], tail: str = "") -> str:
    """``fn(args..., tail)``; ``tail`` is keyword text that starts with ``", "`` (or is empty)."""
    text = ", ".join(args) + tail
    return f"{fn}({text.removeprefix(', ')})"


def _is_literal(v: Any) -> bool:
    if isinstance(v, tuple | list):
        return all(map(_is_literal, v))
    if isinstance(v, slice):
        return all(map(_is_literal, (v.start, v.stop, v.step)))
    if isinstance(v, float):
        return np.isfinite(v)
    return type(v) in _LITERALS or v is Ellipsis


class Writer:
    """Names and lines of one generated step function (see ``codegen.generate``)."""

    def __init__(self, program: Program, plans: dict[Program | Function, Plan],
                 buffers: list[np.ndarray], swaps: dict[Step, int], h2d: list[Any],
                 d2h: list[Any], transfers: int, backend: Backend | None = None,
                 arrays: list[np.ndarray] = (), fuse: bool = False,
                 logged: set[Step] = frozenset()) -> None:
        self.program = program
        self.backend = backend
        self.plans = plans
        self.h2d = {s: i for i, s in enumerate(h2d)}
        self.d2h = {s: i for i, s in enumerate(d2h)}
        self.transfers = transfers
        self.lines: list[str] = []
        self.line_ops: dict[int, Op] = {}
        self.namespace: dict[str, Any] = {"np": np}
        self.names: dict[int, str] = {}
        for i, buf in enumerate(buffers):
            self.namespace[f"b{i}"] = buf
        # Arrays that a name always holds, run after run (pool buffers, views of them, the
        # variables and their spares: each swap exchanges arrays of one spec): loop calls on
        # only these skip the backend's per-call type dispatch.
        self.fixed: dict[str, np.ndarray] = {f"b{i}": buf for i, buf in enumerate(buffers)}
        for slot, arr in zip(program.variable_slots, arrays):
            self.fixed[f"w{slot}"] = self.fixed[f"n{slot}"] = arr
        self.swaps = swaps
        self.swapped = set(swaps.values())
        self.bit_views: list[str] = []  # names of arrays' bits views (``bits_views``)
        self.logged = logged  # steps that record what they overwrite (``lower.undo``)
        if logged:
            self.namespace["UNDO"] = []
        self.undo_kernels: dict[str, tuple[Any, Any]] = {}
        for slot in program.variable_slots:
            self.names[slot] = f"w{slot}"
        self.carried = {d for s in program.walk() if s.kind == "loop" for d, _ in s.carried}
        for fn in program.functions:
            self.carried.update(d for s in walk(fn.steps) if s.kind == "loop" for d, _ in s.carried)
        self.loop_vars: dict[Step, str] = {}
        self.index: dict[Step, str] = {}  # host step -> index expression into IN/OUT
        self.counters: list[str] = []  # transfer counters of streams with several sites
        self.plan: Plan = plans[program]
        self.globals_made: dict[str, str] = {}  # constant and view globals -> what they hold
        self.loops = 0  # steps that run (or, without a backend, could run) a compiled loop
        self.fuse = fuse and backend is not None and hasattr(backend, "fuse")
        # Example arrays of the names whose array changes from run to run (host data, views of
        # it): what a segment is compiled for.
        self.samples: dict[str, np.ndarray] = {}
        # The names among those whose array has its sample's type in every run: host data and
        # views of it or of fixed arrays (not loop-carried names: they take several arrays).
        self.typed: set[str] = set()
        self.segments = Segments(backend, self.emit, self.bind_global, self.sample, self.fixed,
                                 self.typed)

    # -- naming --------------------------------------------------------------------------------
    def emit(self, indent: int, text: str, op: Op | None = None, note: str | None = None,
             hoist: bool = False) -> None:
        """Append a line; its comment is ``note`` or else ``op``'s listing line (escaped).
        A line that reads or writes no array data (``hoist``: binding a name, making a view)
        goes before the calls waiting to be fused; any other comes after them."""
        if not hoist:
            self.segments.flush()
        if note is None and op is not None:
            note = annotate.op_comment(op)
        if note is not None:
            text = f"{text}  {annotate.comment(note)}"
        self.lines.append("    " * indent + text)
        if op is not None:
            self.line_ops[len(self.lines)] = op

    def bind_global(self, prefix: str, value: Any) -> str:
        """A deterministic global name for ``value`` (functions are shared by name)."""
        base = re.sub(r"[^0-9A-Za-z_]", "_", prefix)
        name, i = base, 0
        while name in self.namespace and self.namespace[name] is not value:
            i += 1
            name = f"{base}{i}"
        self.namespace[name] = value
        return name

    def attr_text(self, attrs: dict[str, Any]) -> str:
        if not all(k.isidentifier() and k.isascii() and not keyword.iskeyword(k) for k in attrs):
            return f", **{self.bind_global('attrs', attrs)}"
        parts = []
        for k, v in attrs.items():
            text = repr(v) if _is_literal(v) else self.bind_global(f"a_{k}", v)
            parts.append(f"{k}={text}")
        return "".join(", " + p for p in parts)

    def is_static(self, slot: int) -> bool:
        return self.names[slot][0] in "cbv"

    def unmoved(self, name: str) -> np.ndarray | None:
        """The array ``name`` holds in every run, if it is always the same one: a constant,
        pool buffer or view of one, or a variable no step double-buffers (updated in place,
        as in a device loop, or not at all)."""
        if name[0] in "cbv":
            return self.namespace[name]
        if name[0] == "w" and int(name[1:]) not in self.swapped:
            return self.fixed.get(name)
        return None

    def arg(self, s: Step, i: int) -> str:
        name = self.names[s.ins[i]]
        if i in self.plan.copies.get(s, ()):
            return f"np.array({name})"
        if i in self.plan.densify.get(s, ()):
            fixed = self.unmoved(name)
            if fixed is not None and (fixed.flags.c_contiguous or fixed.flags.f_contiguous):
                return name  # always dense: ``dense`` would give it as it is
            return f"{self.bind_global('dense', dense)}({name})"
        return name

    def set_name(self, slot: int, name: str, indent: int) -> None:
        """Name ``slot``; a loop-carried slot must be a local, so it gets an assignment."""
        if slot in self.carried and name != f"s{slot}":
            self.emit(indent, f"s{slot} = {name}", hoist=True)
            self.sample_as(f"s{slot}", name)
            name = f"s{slot}"
        self.names[slot] = name

    def sample(self, name: str) -> np.ndarray | None:
        """An array of the type ``name`` holds in every run (None: unknown)."""
        found = self.fixed.get(name)
        return self.samples.get(name) if found is None else found

    def sample_as(self, name: str, source: str) -> None:
        self.typed.discard(name)
        found = self.sample(source)
        if found is not None:
            self.samples[name] = found
