"""Layouts: which memory layout every value has, and which kernels write into pool buffers.

numpy picks a result's layout, and so the order of later reductions, from its inputs' strides.
This pass tracks layouts so that the optimised path hands every kernel the same memory layout as
the interpreter does (which copies view results). A view that may be non-dense (a stepped
slice, a broadcast) is made dense before a kernel reads it, a view that shares memory with
another input of the same kernel is copied (numpy's matmul treats ``a @ a.T`` specially), and a
ufunc writes into a C-ordered pool buffer only when its inputs are C-contiguous. Layouts come
from declared facts (``OpDef.layout``), never from running kernels.
"""

from __future__ import annotations

import numpy as np

from xlgraph.core.trampoline import Nested, run
from xlgraph.lower.program import Step
from xlgraph.lower.storage import Plan
from xlgraph.tensor import TensorSpec


def pure_view(s: Step) -> bool:
    """A view step whose result depends only on its one input's buffer and attributes (so a
    view of a fixed array can be computed once)."""
    return s.kind == "kernel" and s.defn.view and not s.defn.side_effect and len(s.ins) == 1


def _ufunc_dtype_ok(specs: list[TensorSpec]) -> bool:
    """Whether a numpy ufunc writing into an ``out=`` buffer of the inferred dtype gives what it
    gives unconstrained: so when every operand has one floating dtype (numpy's ufuncs keep a
    floating dtype; on integers some, like ``divide`` and ``sqrt``, change it)."""
    dtype = specs[0].dtype
    return dtype.is_floating_point and all(s.dtype is dtype for s in specs)


class _Layouts:
    def __init__(self, plan: Plan, specs: dict[int, TensorSpec]) -> None:
        self.plan = plan
        self.specs = specs

    def can_use_out(self, s: Step, layouts: list[str]) -> bool:
        if any(self.plan.root[o] in self.plan.escaping for o in s.outs):
            return False
        fn = s.defn.kernel_out
        if not isinstance(fn, np.ufunc):
            return True  # contract: a custom kernel_out matches kernel bit for bit
        if not _ufunc_dtype_ok([self.specs[x] for x in s.ins + s.outs]):
            return False
        return fn.signature is not None or all(lay == "C" for lay in layouts)

    def view_layout(self, s: Step) -> str:
        """The layout a view step gives, as its op declares it (``OpDef.layout``: from the
        viewed input's spec and the attributes, whatever the values of other inputs, such as a
        dynamic slice's offsets)."""
        src = s.alias_source
        if self.plan.layout[src] != "C" or s.defn.side_effect or s.defn.layout is None:
            return "?"
        return s.defn.layout(self.specs[src], **s.attrs)

    def kernel(self, s: Step) -> None:
        p, d = self.plan, s.defn
        lay = p.layout
        src = s.alias_source
        if src is not None and d.view:
            out = s.outs[0]
            view = self.view_layout(s)
            if s.copy_out:  # np.array(view): dense, in the view's axis order
                lay[out] = "C" if view == "C" else "D"
            else:
                lay[out] = view
                p.viewish.add(out)
            return
        copies = {i for i, x in enumerate(s.ins)
                  if x in p.viewish and lay[x] == "?" and i != d.inplace_of}
        if copies:
            p.densify[s] = copies
        shared = {i for i, x in enumerate(s.ins) if x in p.viewish and i != d.inplace_of
                  and any(y != x and p.root[y] == p.root[x] for y in s.ins)}
        if shared:  # numpy may take another path for aliased operands (matmul: a @ a.T)
            p.copies[s] = shared
        if src is not None:  # modifies an input in place
            lay[s.outs[0]] = lay[src]
            if src in p.viewish:
                p.viewish.add(s.outs[0])
            if d.kernel_out is not None:
                p.use_out.add(s)
            return
        layouts = ["?" if i in copies else lay[x] for i, x in enumerate(s.ins)]
        fn = d.kernel_out
        if fn is not None and self.can_use_out(s, layouts):
            p.use_out.add(s)
            c_out = True
        else:
            c_out = d.c_contiguous or (
                isinstance(d.kernel, np.ufunc)
                and (d.kernel.signature is not None or all(x == "C" for x in layouts)))
        for o in s.outs:
            lay[o] = "C" if c_out else "?"

    def decide(self, steps: list[Step]) -> Nested[None]:
        p = self.plan
        for s in steps:
            p.use_out.discard(s)
            p.densify.pop(s, None)
            p.copies.pop(s, None)
            p.viewish.difference_update(s.outs)
            if s.kind == "kernel":
                self.kernel(s)
            elif s.kind in ("bind", "ref"):
                src, out = s.ins[0], s.outs[0]
                if s.copy_out:
                    p.layout[out] = "C" if p.layout[src] == "C" else "D"
                else:
                    p.layout[out] = p.layout[src]
                    if src in p.viewish:
                        p.viewish.add(out)
            elif s.kind in ("host_load", "const"):
                p.layout[s.outs[0]] = "C"
            elif s.kind == "func":  # arguments as the interpreter binds them: fresh copies
                slots_of: dict[int, set[int]] = {}  # root -> the distinct argument slots on it
                for x in s.ins:
                    slots_of.setdefault(p.root[x], set()).add(x)
                shared = {i for i, x in enumerate(s.ins) if len(slots_of[p.root[x]]) > 1}
                copies = {i for i, x in enumerate(s.ins) if x in p.viewish and p.layout[x] == "?"}
                if copies:
                    p.densify[s] = copies
                if shared:
                    p.copies[s] = shared
                p.layout.update((o, "?") for o in s.outs)
            elif s.kind == "loop":
                yield self.loop(s)
            elif s.kind == "cond":
                yield self.decide(s.body)
                yield self.decide(s.orelse)
                for out, srcs in zip(s.outs, s.carried):
                    c = all(p.layout[x] == "C" for x in srcs)
                    p.layout[out] = "C" if c else "D"
            else:
                p.layout.update((o, "?") for o in s.outs)
                p.viewish.update(s.outs)

    def loop(self, s: Step) -> Nested[None]:
        """Decide the body until the carried values' layouts are stable (a few rounds at most)."""
        p = self.plan
        for _ in range(3):
            yield self.decide(s.body)
            stable = True
            for dst, src in s.carried:
                lay = p.layout[dst] if p.layout[dst] == p.layout[src] else "?"
                view = dst in p.viewish or src in p.viewish
                if lay != p.layout[dst] or view != (dst in p.viewish):
                    stable = False
                p.layout[dst] = lay
                if view:
                    p.viewish.add(dst)
            if stable:
                return
        for dst, _ in s.carried:
            p.layout[dst] = "?"
            p.viewish.add(dst)
        yield self.decide(s.body)


def decide_layouts(steps: list[Step], plan: Plan, specs: dict[int, TensorSpec],
                   entry: list[int], entry_layout: str) -> None:
    """Fill ``plan.layout``, ``viewish``, ``use_out``, ``densify`` and ``copies`` for ``steps``
    (``plan.root`` and ``plan.escaping`` must be set)."""
    plan.layout.update((slot, entry_layout) for slot in entry)
    run(_Layouts(plan, specs).decide(steps))
