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
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from xlgraph.lower import annotate
from xlgraph.lower.backends import Backend
from xlgraph.lower.layouts import pure_view
from xlgraph.lower.plan import Plan, is_elementwise_ufunc, new_buffer
from xlgraph.lower.program import Function, Program, Step, walk
from xlgraph.lower.segments import FusedCall, Segments
from xlgraph.op import Op
from xlgraph.ops.loops import RAISING

_FILENAME = "<xlgraph-step>"
_LITERALS = (bool, int, float, str, type(None))


@dataclass(eq=False)
class CompiledStep:
    """The generated function ``fn(IN, OUT, V, N)`` and what is needed to explain its failures."""

    fn: Callable[..., None]
    source: str
    line_ops: dict[int, Op]
    loops: int = 0  # steps with a loop form that applies (compiled when a backend was given)


def dense(a: np.ndarray) -> np.ndarray:
    """``a`` if it is contiguous, else a dense copy in its own axis order: exactly the layout
    the interpreter's copy of a view has (so kernels see the same strides on both paths)."""
    return a if a.flags.c_contiguous or a.flags.f_contiguous else np.array(a)


def _call(fn: str, args: list[str], tail: str = "") -> str:
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


class _Writer:
    def __init__(self, program: Program, plans: dict[Program | Function, Plan],
                 buffers: list[np.ndarray], swaps: dict[Step, int], h2d: list[Any],
                 d2h: list[Any], transfers: int, backend: Backend | None = None,
                 arrays: list[np.ndarray] = (), fuse: bool = False) -> None:
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
        self.segments = Segments(backend, self.emit, self.bind_global, self.sample, self.fixed)

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
        found = self.sample(source)
        if found is not None:
            self.samples[name] = found

    # -- steps ---------------------------------------------------------------------------------
    def kernel(self, s: Step, indent: int) -> None:
        d, plan = s.defn, self.plan
        src = s.alias_source
        args = [self.arg(s, i) for i in range(len(s.ins))]
        attrs = self.attr_text(s.attrs)
        if src is not None and d.view:
            self.view(s, args, attrs, indent)
            return
        if s in plan.use_out and self.compiled_loop(s, args, indent):
            return
        if src is not None:  # modifies an input in place; the output is that input
            if s in plan.use_out:
                fn = self.bind_global(f"o_{d.name}", d.kernel_out)
                extra = self.scratch_text(s)
                if s in self.swaps:  # the result goes to the variable's spare array
                    self.names[src] = f"n{src}"
                self.emit(indent, _call(fn, args, f", out={self.names[src]}{extra}{attrs}"), s.op)
            else:
                fn = self.bind_global(f"k_{d.name}", d.kernel)
                self.emit(indent, _call(fn, args, attrs), s.op)
            self.set_name(s.outs[0], self.names[src], indent)
            return
        if s in plan.use_out:
            outs = [f"b{plan.buffer_of[o]}" for o in s.outs]
            fn = self.bind_global(f"o_{d.name}", d.kernel_out)
            if self.fuse and self.segments.fusable_matmul(s, self.program.specs, args, outs):
                self.segments.add(FusedCall(indent, f"np.dot({args[0]}, {args[1]}, {outs[0]})",
                                            _call(fn, args, f", out={outs[0]}"), s.op, False))
            elif is_elementwise_ufunc(d.kernel_out) and not attrs:
                self.emit(indent, f"{fn}({', '.join([*args, outs[0]])})", s.op)
            else:
                out = outs[0] if len(outs) == 1 else f"({', '.join(outs)})"
                extra = self.scratch_text(s)
                self.emit(indent, _call(fn, args, f", out={out}{extra}{attrs}"), s.op)
            for o, name in zip(s.outs, outs):
                self.set_name(o, name, indent)
            return
        fn = self.bind_global(f"k_{d.name}", d.kernel)
        lhs = ", ".join(f"s{o}" for o in s.outs)
        self.emit(indent, f"{lhs} = {_call(fn, args, attrs)}" if lhs else _call(fn, args, attrs),
                  s.op)  # an op without outputs (remote_store) is a plain call
        for o in s.outs:
            self.names[o] = f"s{o}"
            if not self.program.specs[o].shape:  # ufuncs give numpy scalars for 0-d results
                self.emit(indent, f"s{o} = np.asarray(s{o})")

    def compiled_loop(self, s: Step, args: list[str], indent: int) -> bool:
        """Emit a call of the backend's compiled loop form of ``s`` instead of its
        ``kernel_out``, when there is one, every input is C-contiguous and no two inputs are
        different views of one buffer (numpy buffers overlapping operands; a loop would not)."""
        d, plan, specs = s.defn, self.plan, self.program.specs
        roots = {plan.root[x]: x for x in s.ins}
        if (d.loop is None or s in plan.densify
                or s in plan.copies or any(plan.layout[x] != "C" for x in s.ins)
                or len(roots) != len(set(s.ins))):
            return False
        ins = [specs[x] for x in s.ins]
        if self.backend is None:  # count it: a backend may compile it later
            self.loops += d.loop(ins, **s.attrs) is not None
            return False
        found = self.backend.kernel(d.loop, ins, [specs[o] for o in s.outs], s.attrs)
        if found is None:
            return False
        self.loops += 1
        fn, extra = found
        src = s.alias_source
        if src is not None and s in self.swaps:  # the result goes to the spare array
            self.names[src] = f"n{src}"
        outs = [self.names[src]] if src is not None else [f"b{plan.buffer_of[o]}"
                                                           for o in s.outs]
        consts = [repr(x) if isinstance(x, int) else self.bind_global(f"x_{d.name}", x)
                  for x in extra]
        fixed = [self.fixed.get(name) for name in (*args, *outs)]
        direct = None if any(a is None for a in fixed) else self.backend.direct(
            fn, [*fixed, *extra])
        name = self.bind_global(f"j_{d.name}", fn if direct is None else direct)
        call = f"{name}({', '.join([*args, *outs, *consts])})"
        if self.fuse and hasattr(fn, "overloads"):  # a compiled loop (not Python calling some)
            for c in consts:
                if not c[0].isdigit() and c[0] != "-":
                    self.segments.namespace[c] = self.namespace[c]
            self.segments.namespace[name] = fn
            raises = getattr(fn, "py_func", None) in RAISING
            self.segments.add(FusedCall(indent, call, call, s.op, raises))
        else:
            self.emit(indent, call, s.op)
        for o, name in zip(s.outs, outs):
            self.set_name(o, name, indent)
        return True

    def scratch_text(self, s: Step) -> str:
        bufs = self.plan.scratch.get(s)
        return f", scratch=({''.join(f'b{b}, ' for b in bufs)})" if bufs else ""

    def view(self, s: Step, args: list[str], attrs: str, indent: int) -> None:
        out, src = s.outs[0], s.alias_source
        name = None
        base = self.unmoved(self.names[src])
        if base is not None and pure_view(s):  # a view of a fixed array is fixed: make it now
            try:
                arr = s.defn.kernel(base, **s.attrs)
            except Exception:  # noqa: BLE001 - leave the failure to run time, naming the op
                arr = None
            if isinstance(arr, np.ndarray) and np.may_share_memory(arr, base):
                name = f"v{out}"
                self.namespace[name] = self.fixed[name] = arr
                self.globals_made[name] = (f"{annotate.tensor_text(s.op, 0)}, a {s.defn.name} view "
                                           f"of {self.names[src]}")
        hoist = False
        if name is None:
            fn = self.bind_global(f"k_{s.defn.name}", s.defn.kernel)
            name = _call(fn, args, attrs)
            hoist = self.view_sample(s, f"s{out}", args)
        if s.copy_out:
            self.emit(indent, f"s{out} = np.array({name})", s.op)
            self.names[out] = f"s{out}"
            self.samples.pop(f"s{out}", None)
        elif name.startswith("v"):
            self.set_name(out, name, indent)
        else:
            self.emit(indent, f"s{out} = {name}", s.op, hoist=hoist)
            self.names[out] = f"s{out}"

    def view_sample(self, s: Step, name: str, args: list[str]) -> bool:
        """Record the example array of a view of arrays whose examples are known; whether the
        view shares its input's memory (then making it reads no data: it may be hoisted)."""
        ins = [self.sample(a) for a in args]
        if not pure_view(s) or any(a is None for a in ins):
            return False
        try:
            arr = s.defn.kernel(*ins, **s.attrs)
        except Exception:  # noqa: BLE001 - no example: the segment stays separate lines
            return False
        if not isinstance(arr, np.ndarray) or not np.may_share_memory(arr, ins[0]):
            return False
        self.samples[name] = arr
        return True

    def step(self, s: Step, indent: int) -> None:
        k = s.kind
        if k == "kernel":
            self.kernel(s, indent)
        elif k in ("bind", "ref"):
            src = self.names[s.ins[0]]
            if s.copy_out:
                self.emit(indent, f"s{s.outs[0]} = np.array({src})", s.op)
                self.names[s.outs[0]] = f"s{s.outs[0]}"
            else:
                self.set_name(s.outs[0], src, indent)
        elif k == "const":
            self.const(s, indent)
        elif k == "host_load":
            self.counter(s, indent)
            expr = f"IN[{self.h2d[s.attrs['stream']]}]{self.index.get(s, '')}"
            self.emit(indent, f"s{s.outs[0]} = {f'np.array({expr})' if s.copy_out else expr}",
                      s.op)
            self.names[s.outs[0]] = f"s{s.outs[0]}"
            spec = self.program.specs[s.outs[0]]  # inputs come C-contiguous (HostIO)
            stream = getattr(s.attrs["stream"], "name", s.attrs["stream"])
            self.samples[f"s{s.outs[0]}"] = new_buffer(
                spec.shape, spec.dtype.as_numpy(),
                f"the data of stream {stream!r} loaded by {s.op.describe()}", np.empty)
        elif k == "host_store":
            i = self.d2h[s.attrs["stream"]]
            self.counter(s, indent)
            self.emit(indent, f"OUT[{i}]{self.index.get(s, '[...]')} = "
                      f"{self.names[s.ins[0]]}", s.op)
        elif k == "loop":
            self.loop(s, indent)
        elif k == "cond":
            self.emit(indent, f"if {self.names[s.ins[0]]}.item():", s.op)
            self.branch(s.body, [(o, src[0]) for o, src in zip(s.outs, s.carried)], indent + 1)
            self.emit(indent, "else:")
            self.branch(s.orelse, [(o, src[1]) for o, src in zip(s.outs, s.carried)], indent + 1)
        elif k == "func":
            args = ", ".join(self.arg(s, i) for i in range(len(s.ins)))
            lhs = "".join(f"s{o}, " for o in s.outs)
            call = f"{s.func.name}({args})"
            self.emit(indent, f"{lhs}= {call}" if lhs else call, s.op)
            for o in s.outs:
                self.names[o] = f"s{o}"
        else:
            raise NotImplementedError(f"no code generation for step kind {k!r}")

    def const(self, s: Step, indent: int) -> None:
        slot = s.outs[0]
        name = f"c{slot}"
        value = s.value
        self.namespace[name] = self.fixed[name] = (value if value.flags.c_contiguous
                                                   else value.copy())
        tensor = self.program.constant_slots.get(slot)
        self.globals_made[name] = (f"%{tensor.name}:{tensor.spec}" if tensor is not None else
                                   f"{annotate.tensor_text(s.op, s.outs.index(slot))}, folded")
        buf = self.plan.buffer_of.get(slot)
        if buf is not None:
            self.emit(indent, f"np.copyto(b{buf}, {name})", s.op)
            self.set_name(slot, f"b{buf}", indent)
        elif s.copy_out:
            self.emit(indent, f"s{slot} = {name}.copy()", s.op)
            self.names[slot] = f"s{slot}"
        else:
            self.set_name(slot, name, indent)

    def counter_name(self, s: Step) -> str:
        if s.kind == "host_load":
            return f"h{self.h2d[s.attrs['stream']]}_i"
        return f"d{self.d2h[s.attrs['stream']]}_i"

    def counter(self, s: Step, indent: int) -> None:
        """Count transfers where no loop variable gives the index (several sites per stream)."""
        if self.transfers > 1 and s not in self.index:
            name = self.counter_name(s)
            self.emit(indent, f"{name} += 1")
            self.index[s] = f"[({name} - 1) % {self.transfers}]"

    def loop(self, s: Step, indent: int) -> None:
        var = self.loop_vars.get(s, "_")
        self.emit(indent, f"for {var} in range({s.count}):", s.op)
        for inner in s.body:
            self.step(inner, indent + 1)
        if s.carried:
            dst = ", ".join(f"s{d}" for d, _ in s.carried)
            src = ", ".join(self.names[r] for _, r in s.carried)
            self.emit(indent + 1, f"{dst} = {src}")
        elif not s.body:
            self.emit(indent + 1, "pass")
        self.segments.flush()

    def branch(self, body: list[Step], results: list[tuple[int, int]], indent: int) -> None:
        """One arm of a ``cond``: its steps, then a fresh copy of each result in the output."""
        for inner in body:
            self.step(inner, indent)
        for dst, src in results:
            self.emit(indent, f"s{dst} = np.array({self.names[src]})")
            self.names[dst] = f"s{dst}"
        if not body and not results:
            self.emit(indent, "pass")
        self.segments.flush()

    # -- functions -----------------------------------------------------------------------------
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
             arrays: list[np.ndarray] = (), fuse: bool = False) -> CompiledStep:
    """Compile ``program`` into a Python function ``step(IN, OUT, V, N)``.

    ``plans`` maps each body (the program and each function) to its buffer plan and
    ``buffers`` are the pool arrays (bound into the function). ``IN``/``OUT`` are the host
    arrays of the h2d/d2h streams in the given order, ``V`` the variables' device arrays (in
    ``program.variable_slots`` order) and ``N`` the spare arrays of the variables in ``swaps``
    (``{step: variable slot}``, in slot order), which those steps write instead. With a
    ``backend``, steps whose op has a loop form call its compiled version instead; ``arrays``
    (the variables' device arrays, as ``V``) lets calls on variables skip its type dispatch;
    ``fuse`` runs consecutive compiled calls as segments (see the module docstring).
    """
    writer = _Writer(program, plans, buffers, swaps, h2d, d2h, transfers, backend, arrays,
                     fuse)
    source = writer.source()
    code = compile(source, _FILENAME, "exec")
    namespace = writer.namespace
    exec(code, namespace)  # noqa: S102 - generated from the Ir; names only in escaped comments
    return CompiledStep(namespace["step"], source, writer.line_ops, writer.loops)


def failing_op(compiled: CompiledStep, exc: BaseException) -> Op | None:
    """The op whose generated line raised ``exc``, if the traceback passes through it."""
    tb = exc.__traceback__
    op = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == _FILENAME:
            op = compiled.line_ops.get(tb.tb_lineno, op)
        tb = tb.tb_next
    return op
