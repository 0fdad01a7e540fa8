"""The generated step's statements: one line or a few per straight-line step.

A kernel call (through ``kernel_out`` into a pool buffer, a backend's compiled loop form, or a
fresh result), a view (made once when its source never moves), a constant, a host transfer, a
binding and a call of a compiled function. ``codegen_loops.py`` adds loops and branches.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xlgraph.lower import annotate
from xlgraph.lower.codegen_writer import Writer, call_text
from xlgraph.lower.layouts import pure_view
from xlgraph.lower.plan import is_elementwise_ufunc, new_buffer
from xlgraph.lower.program import Step
from xlgraph.lower.segments import FusedCall
from xlgraph.lower.undo import logging_kernel
from xlgraph.op import OpDef
from xlgraph.ops.half import bits_parts
from xlgraph.ops.loops import RAISING

__all__ = ["Statements"]


class Statements(Writer):
    """``Writer`` plus the statements of straight-line steps."""

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
                self.emit(indent, call_text(fn, args, f", out={self.names[src]}{extra}{attrs}"),
                          s.op)
            elif s in self.logged:  # saves the region it overwrites first
                fn = self.bind_global(f"u_{d.name}", self.undo_kernel(d))
                self.emit(indent, call_text(fn, ["UNDO", *args], attrs), s.op)
            else:
                fn = self.bind_global(f"k_{d.name}", d.kernel)
                self.emit(indent, call_text(fn, args, attrs), s.op)
            self.set_name(s.outs[0], self.names[src], indent)
            return
        if s in plan.use_out:
            outs = [f"b{plan.buffer_of[o]}" for o in s.outs]
            fn = self.bind_global(f"o_{d.name}", d.kernel_out)
            fused = self.segments.matmul_call(s, self.program.specs, args, outs) \
                if self.fuse else None
            if fused is not None:
                self.segments.add(FusedCall(indent, fused, call_text(fn, args, f", out={outs[0]}"),
                                            s.op, False))
            elif is_elementwise_ufunc(d.kernel_out) and not attrs:
                self.emit(indent, f"{fn}({', '.join([*args, outs[0]])})", s.op)
            else:
                out = outs[0] if len(outs) == 1 else f"({', '.join(outs)})"
                extra = self.scratch_text(s)
                self.emit(indent, call_text(fn, args, f", out={out}{extra}{attrs}"), s.op)
            for o, name in zip(s.outs, outs):
                self.set_name(o, name, indent)
            return
        fn = self.bind_global(f"k_{d.name}", d.kernel)
        lhs = ", ".join(f"s{o}" for o in s.outs)
        text = call_text(fn, args, attrs)
        self.emit(indent, f"{lhs} = {text}" if lhs else text,
                  s.op)  # an op without outputs (remote_store) is a plain call
        for o in s.outs:
            self.names[o] = f"s{o}"
            if not self.program.specs[o].shape:  # ufuncs give numpy scalars for 0-d results
                self.emit(indent, f"s{o} = np.asarray(s{o})")

    def undo_kernel(self, d: OpDef) -> Any:
        """``d``'s kernel recording an undo entry (one function per op definition)."""
        found = self.undo_kernels.get(d.name)
        if found is None or found[0] is not d:
            found = self.undo_kernels[d.name] = (d, logging_kernel(d))
        return found[1]

    def compiled_loop(self, s: Step, args: list[str], indent: int) -> bool:
        """Emit a call of the backend's compiled loop form of ``s`` instead of its
        ``kernel_out``, when there is one and ``loop_ready(s)``."""
        d, plan, specs = s.defn, self.plan, self.program.specs
        per = getattr(d.kernel, "per_replica", None)
        if per is not None:
            return self.per_replica_loop(s, per, args, indent)
        dense = plan.densify.get(s, ())
        if not self.loop_ready(s):
            return False
        ins = [specs[x] for x in s.ins]
        if self.backend is None:  # count it: a backend may compile it later
            self.loops += d.loop(ins, **s.attrs) is not None
            return False
        found = self.backend.kernel(d.loop, ins, [specs[o] for o in s.outs], s.attrs)
        if found is None:
            return False
        self.loops += 1
        outs = self.loop_outs(s)
        self.loop_call(d.name, found, [*args, *outs], s.op, indent, plain=not dense)
        for o, name in zip(s.outs, outs):
            self.set_name(o, name, indent)
        return True

    def loop_outs(self, s: Step) -> list[str]:
        """The names a loop form of ``s`` writes: a modified input's array, or its spare
        (then the input's name from here on), or pool buffers."""
        src = s.alias_source
        if src is not None and s in self.swaps:  # the result goes to the spare array
            self.names[src] = f"n{src}"
        return [self.names[src]] if src is not None else [f"b{self.plan.buffer_of[o]}"
                                                          for o in s.outs]

    def loop_call(self, prefix: str, found: tuple[Any, tuple], arrays: list[str], op: Any,
                  indent: int, plain: bool = True, note: str | None = None,
                  raises: bool = False) -> None:
        """Emit the call of compiled loop ``found`` (``(fn, extra)``) on ``arrays``: bound to
        its machine code's entry point where every array is fixed, and queued for a segment
        when it is compiled and its arguments are ``plain`` names. It ``raises`` (alone in its
        segment) if so marked or listed in ``loops.RAISING``."""
        fn, extra = found
        parts = bits_parts(fn) if self.fuse and plain else None
        viewed = None if parts is None else self.bits_views(arrays, parts[1], indent)
        if viewed is not None:  # the compiled loop itself on views: it joins segments
            fn, arrays = parts[0], viewed
        consts = self.loop_consts(prefix, extra)
        fixed = [self.fixed.get(name) for name in arrays]
        direct = None if any(a is None for a in fixed) else self.backend.direct(
            fn, [*fixed, *extra])
        name = self.bind_global(f"j_{prefix}", fn if direct is None else direct)
        call = f"{name}({', '.join([*arrays, *consts])})"
        if self.fuse and hasattr(fn, "overloads") and plain:  # compiled, plain arguments
            self.share_with_segments(name, fn, consts)
            raises = raises or getattr(fn, "py_func", None) in RAISING
            self.segments.add(FusedCall(indent, call, call, op, raises, note=note))
        else:
            self.emit(indent, call, op, note=note)

    def loop_ready(self, s: Step) -> bool:
        """Whether ``s`` (run through ``kernel_out``, not per replica) may call its loop form:
        it has one, no input is always copied, every input is C-contiguous (a view made dense
        counts where it has one axis: ``dense`` gives it C-contiguous) and no two inputs are
        different views of one buffer (numpy buffers overlapping operands; a loop would not)."""
        plan, specs = self.plan, self.program.specs
        dense = plan.densify.get(s, ())
        return not (s.defn.loop is None or any(len(specs[s.ins[i]].shape) > 1 for i in dense)
                    or s in plan.copies
                    or any(plan.layout[x] != "C" for i, x in enumerate(s.ins) if i not in dense)
                    or len({plan.root[x] for x in s.ins}) != len(set(s.ins)))

    def bits_views(self, names: list[str], views: tuple, indent: int) -> list[str] | None:
        """``names`` with those that ``views`` gives a dtype replaced by views of their arrays
        as that dtype (``xlgraph.ops.half.bits_parts``): a global made once for an array a
        name holds in every run, a line of the step for a variable's (double-buffered)
        arrays; None where a name holds other arrays (the loop's Python wrapper views them)."""
        out = []
        for name, dtype in zip(names, views):
            if dtype is None:
                out.append(name)
                continue
            if not self.viewable(name):
                return None
            fixed, sample = self.unmoved(name), self.fixed[name]
            view = f"h{len(self.bit_views)}"
            self.bit_views.append(view)
            self.fixed[view] = sample.view(dtype)
            if fixed is not None:
                self.namespace[view] = fixed.view(dtype)
            else:
                self.emit(indent, f"{view} = {name}.view(np.{np.dtype(dtype).name})",
                          hoist=True)
            out.append(view)
        return out

    def viewable(self, name: str) -> bool:
        """Whether ``bits_views`` can view the array(s) that ``name`` holds."""
        return name[:1] in ("b", "c", "v", "w", "n") and name in self.fixed

    def loop_consts(self, name: str, extra: tuple) -> list[str]:
        """The text of a loop form's extra arguments (ints as literals, others as globals)."""
        return [repr(x) if isinstance(x, int) else self.bind_global(f"x_{name}", x)
                for x in extra]

    def share_with_segments(self, name: str, fn: object, consts: list[str]) -> None:
        """Make loop ``fn`` (called ``name``) and its constant globals known to segments."""
        for c in consts:
            if not c[0].isdigit() and c[0] != "-":
                self.segments.namespace[c] = self.namespace[c]
        self.segments.namespace[name] = fn

    def per_replica_loop(self, s: Step, per: tuple, args: list[str], indent: int) -> bool:
        """A replicated step whose op has a loop form (``replica_forms.replica_defn`` leaves
        ``per_replica``: the op, which inputs vary, one replica's specs): with segments,
        the loop form once per replica inside a compiled segment (``for r in range(n):``,
        varying arrays indexed by ``r``, values held once as they are), each replica's bits
        those of a one-replica step; the line it falls back to is the replicated kernel."""
        defn, vary, ins, outs = per
        plan = self.plan
        if self.backend is None:  # count it: a backend may compile it later
            self.loops += self.fuse and defn.loop(ins, **s.attrs) is not None
            return False
        if (not self.fuse or s in plan.copies or plan.densify.get(s)
                or len({plan.root[x] for x in s.ins}) != len(set(s.ins))
                or any(plan.layout[x] != "C" for x in s.ins)):
            return False
        found = self.backend.kernel(defn.loop, ins, outs, s.attrs)
        if found is None or not hasattr(found[0], "overloads"):
            return False
        self.loops += 1
        fn, extra = found
        consts = self.loop_consts(defn.name, extra)
        name = self.bind_global(f"j_{defn.name}", fn)
        self.share_with_segments(name, fn, consts)
        out_names = [f"b{plan.buffer_of[o]}" for o in s.outs]
        sliced = [f"{a}[r]" if v else a for a, v in zip(args, vary)]
        text = (f"for r in range({self.program.specs[s.outs[0]].shape[0]}): "
                f"{name}({', '.join([*sliced, *(f'{o}[r]' for o in out_names), *consts])})")
        out = out_names[0] if len(out_names) == 1 else f"({', '.join(out_names)})"
        plain = call_text(self.bind_global(f"o_{s.defn.name}", s.defn.kernel_out), args,
                          f", out={out}{self.attr_text(s.attrs)}")
        raises = getattr(fn, "py_func", None) in RAISING
        self.segments.add(FusedCall(indent, text, plain, s.op, raises, alone=True))
        for o, out_name in zip(s.outs, out_names):
            self.set_name(o, out_name, indent)
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
            name = call_text(fn, args, attrs)
            hoist = self.view_sample(s, f"s{out}", args)
        if s.copy_out:
            self.emit(indent, f"s{out} = np.array({name})", s.op)
            self.names[out] = f"s{out}"
            self.samples.pop(f"s{out}", None)
            self.typed.discard(f"s{out}")
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
        if all(a in self.fixed or a in self.typed for a in args):
            self.typed.add(name)
        else:
            self.typed.discard(name)
        return True

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

    def statement(self, s: Step, indent: int) -> None:
        """The code of ``s``, a step of any kind but ``loop`` and ``cond``."""
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
            self.typed.add(f"s{s.outs[0]}")
        elif k == "host_store":
            i = self.d2h[s.attrs["stream"]]
            self.counter(s, indent)
            self.emit(indent, f"OUT[{i}]{self.index.get(s, '[...]')} = "
                      f"{self.names[s.ins[0]]}", s.op)
        elif k == "func":
            args = ", ".join(self.arg(s, i) for i in range(len(s.ins)))
            lhs = "".join(f"s{o}, " for o in s.outs)
            call = f"{s.func.name}({args})"
            self.emit(indent, f"{lhs}= {call}" if lhs else call, s.op)
            for o in s.outs:
                self.names[o] = f"s{o}"
        else:
            raise NotImplementedError(f"no code generation for step kind {k!r}")
