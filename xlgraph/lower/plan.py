"""Liveness, layouts and the buffer pool: decide once where every value lives at run time.

For one body of steps (the main program or a compiled function) the planner

1. maps every slot to its *storage root* (views, binds and in-place ops share their source's
   storage) and computes each root's last use; a read inside a loop or branch of a value made
   outside it counts at the end of that region. Values that leave the loop iteration that made
   them (carried or read after the loop) and function results *escape*: they stay fresh arrays;
2. tracks array layouts so that the optimised path hands every kernel the same memory layout as
   the interpreter does (which copies view results): numpy picks a result's layout, and so the
   order of later reductions, from its inputs' strides. A view that may be non-dense (a stepped
   slice, a broadcast) is made dense before a kernel reads it, a view that shares memory with
   another input of the same kernel is copied (numpy's matmul treats ``a @ a.T`` specially),
   and a ufunc writes into a C-ordered pool buffer only when its inputs are C-contiguous;
3. assigns pool buffers (one per shape and dtype in use at once) to the outputs of kernels run
   through ``kernel_out``. An elementwise ufunc writes into the buffer of an input that dies at
   that step: chains of elementwise ops fuse into one scratch buffer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from xlgraph.lower.alias import spans
from xlgraph.lower.program import Step, walk
from xlgraph.tensor import TensorSpec

Key = tuple[tuple[int, ...], np.dtype]
_END = 1 << 60  # "read after the body": function results


def key_of(spec: TensorSpec) -> Key:
    return spec.shape, np.dtype(spec.dtype.as_numpy())


def pure_view(s: Step) -> bool:
    """A view step whose result depends only on its one input's buffer and attributes (so a
    view of a fixed array can be computed once)."""
    return s.kind == "kernel" and s.defn.view and not s.defn.side_effect and len(s.ins) == 1


def is_elementwise_ufunc(fn: object) -> bool:
    return isinstance(fn, np.ufunc) and fn.signature is None and fn.nout == 1


def _ufunc_dtype_ok(specs: list[TensorSpec]) -> bool:
    """Whether a numpy ufunc writing into an ``out=`` buffer of the inferred dtype gives what it
    gives unconstrained: so when every operand has one floating dtype (numpy's ufuncs keep a
    floating dtype; on integers some, like ``divide`` and ``sqrt``, change it)."""
    dtype = specs[0].dtype
    return dtype.is_floating_point and all(s.dtype is dtype for s in specs)


class Pool:
    """The buffers of one executable: ``specs[i]`` is the (shape, dtype) of buffer ``i``."""

    def __init__(self) -> None:
        self.specs: list[Key] = []

    def new(self, key: Key) -> int:
        self.specs.append(key)
        return len(self.specs) - 1

    def allocate(self) -> list[np.ndarray]:
        return [np.zeros(shape, dtype) for shape, dtype in self.specs]


@dataclass(eq=False)
class Plan:
    """Where the values of one body live. Steps are keyed by ``id(step)``."""

    root: dict[int, int] = field(default_factory=dict)  # slot -> storage root slot
    positions: dict[int, int] = field(default_factory=dict)  # step -> position (depth first)
    defined: dict[int, int] = field(default_factory=dict)  # root -> position of its step
    last_use: dict[int, int] = field(default_factory=dict)  # root -> position of last read
    escaping: set[int] = field(default_factory=set)  # roots that must be fresh arrays
    layout: dict[int, str] = field(default_factory=dict)
    viewish: set[int] = field(default_factory=set)  # slots that may hold a view
    use_out: set[int] = field(default_factory=set)  # steps run through kernel_out
    densify: dict[int, set[int]] = field(default_factory=dict)  # step -> inputs made dense
    copies: dict[int, set[int]] = field(default_factory=dict)  # step -> inputs always copied
    buffer_of: dict[int, int] = field(default_factory=dict)  # root -> pool buffer
    scratch: dict[int, list[int]] = field(default_factory=dict)  # step -> scratch buffers
    fused_into: dict[int, int] = field(default_factory=dict)  # dying root -> root fused into it

    @property
    def fused(self) -> int:
        """Number of elementwise ops that write into their dying input's buffer."""
        return len(self.fused_into)


class _Planner:
    def __init__(self, steps: list[Step], entry: list[int], results: list[int],
                 specs: dict[int, TensorSpec], pool: Pool, entry_layout: str) -> None:
        self.steps = steps
        self.specs = specs
        self.pool = pool
        self.plan = Plan()
        self.regions: dict[int, tuple[int, int]] = {}
        spans(steps, 0, self.regions)
        self.pos = 0
        self.at = self.plan.positions
        self.created: dict[int, int] = {}
        self.loop_of: dict[int, tuple[int, int]] = {}
        for slot in entry:
            self.plan.root[slot] = slot
            self.plan.layout[slot] = entry_layout
        self.scan(steps, [], [])
        for r in results:
            root = self.plan.root[r]
            self.plan.escaping.add(root)
            self.plan.last_use[root] = _END
        self.decide(steps)
        self.free: dict[Key, list[int]] = {}
        self.dying: dict[int, list[int]] = {}
        self.allocate(steps)

    # -- 1. roots, last uses, escapes ----------------------------------------------------------
    def read(self, slot: int, pos: int, regions: list[tuple[int, int]]) -> None:
        eff = pos
        for start, end in regions:  # outermost first
            if self.created.get(slot, -1) < start:
                eff = max(eff, end)
                break
        root = self.plan.root[slot]
        self.plan.last_use[root] = max(self.plan.last_use.get(root, -1), eff)
        loop = self.loop_of.get(slot)
        if loop is not None and not loop[0] <= pos <= loop[1]:
            self.plan.escaping.add(root)

    def define(self, s: Step, pos: int, loops: list[tuple[int, int]]) -> None:
        src = None if s.copy_out else s.alias_source
        for slot in s.outs:
            self.created[slot] = pos
            self.plan.root[slot] = slot if src is None else self.plan.root[src]
            if src is None:
                self.plan.defined[slot] = pos
            if loops:
                self.loop_of[slot] = loops[-1]

    def scan(self, steps: list[Step], regions: list[tuple[int, int]],
             loops: list[tuple[int, int]]) -> None:
        for s in steps:
            self.pos += 1
            self.at[id(s)] = self.pos
            if s.kind not in ("loop", "cond"):
                for slot in s.ins:
                    self.read(slot, self.pos, regions)
                self.define(s, self.pos, loops)
                continue
            span = self.regions[id(s)]
            inner = [*regions, span]
            if s.kind == "cond":
                self.read(s.ins[0], self.pos, regions)
                self.define(s, self.pos, loops)
            self.scan(s.body + s.orelse, inner, [*loops, span] if s.kind == "loop" else loops)
            for entry in s.carried:
                srcs = entry[1:] if s.kind == "loop" else entry
                for src in srcs:
                    self.read(src, span[1], inner)
                    if s.kind == "loop" and span[0] <= self.created.get(src, -1) <= span[1]:
                        self.plan.escaping.add(self.plan.root[src])

    # -- 2. layouts and kernel_out decisions -----------------------------------------------------
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
        """The layout a view step gives, as its op declares it (``OpDef.layout``)."""
        src = s.alias_source
        if self.plan.layout[src] != "C" or not pure_view(s) or s.defn.layout is None:
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
            p.densify[id(s)] = copies
        shared = {i for i, x in enumerate(s.ins) if x in p.viewish and i != d.inplace_of
                  and any(y != x and p.root[y] == p.root[x] for y in s.ins)}
        if shared:  # numpy may take another path for aliased operands (matmul: a @ a.T)
            p.copies[id(s)] = shared
        if src is not None:  # modifies an input in place
            lay[s.outs[0]] = lay[src]
            if src in p.viewish:
                p.viewish.add(s.outs[0])
            if d.kernel_out is not None:
                p.use_out.add(id(s))
            return
        layouts = ["?" if i in copies else lay[x] for i, x in enumerate(s.ins)]
        fn = d.kernel_out
        if fn is not None and self.can_use_out(s, layouts):
            p.use_out.add(id(s))
            c_out = True
        else:
            c_out = isinstance(d.kernel, np.ufunc) and (
                d.kernel.signature is not None or all(x == "C" for x in layouts))
        for o in s.outs:
            lay[o] = "C" if c_out else "?"

    def decide(self, steps: list[Step]) -> None:
        p = self.plan
        for s in steps:
            p.use_out.discard(id(s))
            p.densify.pop(id(s), None)
            p.copies.pop(id(s), None)
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
                shared = {i for i, x in enumerate(s.ins)
                          if any(y != x and p.root[y] == p.root[x] for y in s.ins)}
                copies = {i for i, x in enumerate(s.ins) if x in p.viewish and p.layout[x] == "?"}
                if copies:
                    p.densify[id(s)] = copies
                if shared:
                    p.copies[id(s)] = shared
                p.layout.update((o, "?") for o in s.outs)
            elif s.kind == "loop":
                self.loop(s)
            elif s.kind == "cond":
                self.decide(s.body)
                self.decide(s.orelse)
                for out, srcs in zip(s.outs, s.carried):
                    c = all(p.layout[x] == "C" for x in srcs)
                    p.layout[out] = "C" if c else "D"
            else:
                p.layout.update((o, "?") for o in s.outs)
                p.viewish.update(s.outs)

    def loop(self, s: Step) -> None:
        """Decide the body until the carried values' layouts are stable (a few rounds at most)."""
        p = self.plan
        for _ in range(3):
            self.decide(s.body)
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
        self.decide(s.body)

    # -- 3. buffers --------------------------------------------------------------------------------
    def take(self, key: Key) -> int:
        free = self.free.get(key)
        return free.pop() if free else self.pool.new(key)

    def give(self, root: int, buffer: int, pos: int) -> None:
        self.plan.buffer_of[root] = buffer
        end = max(self.plan.last_use.get(root, -1), pos)
        self.dying.setdefault(end, []).append(root)

    def fuse_target(self, s: Step, pos: int) -> int | None:
        """A dying input whose buffer an elementwise ufunc can write its output into."""
        fusable = s.defn.elementwise and is_elementwise_ufunc(s.defn.kernel_out)
        if len(s.outs) != 1 or not fusable:
            return None
        key = key_of(self.specs[s.outs[0]])
        for x in s.ins:
            buf = self.plan.buffer_of.get(x)
            if (buf is not None and self.plan.root[x] == x and self.plan.last_use.get(x) == pos
                    and self.pool.specs[buf] == key):
                return x
        return None

    def allocate(self, steps: list[Step]) -> None:
        p = self.plan
        for s in steps:
            pos = self.at[id(s)]
            scratch: list[int] = []
            if id(s) in p.use_out and s.alias_source is None:
                target = self.fuse_target(s, pos)
                if target is not None:
                    buf = p.buffer_of[target]
                    self.dying[pos].remove(target)
                    self.give(s.outs[0], buf, pos)
                    p.fused_into[target] = s.outs[0]
                else:
                    for o in s.outs:
                        self.give(o, self.take(key_of(self.specs[o])), pos)
            elif s.kind == "const" and s.copy_out and s.outs[0] not in p.escaping:
                self.give(s.outs[0], self.take(key_of(self.specs[s.outs[0]])), pos)
            if id(s) in p.use_out:
                n = s.defn.scratch
                scratch = [self.take(key_of(self.specs[s.outs[0]])) for _ in range(n)]
                if scratch:
                    p.scratch[id(s)] = scratch
            self.allocate(s.body + s.orelse)
            for buf in scratch:
                self.free.setdefault(self.pool.specs[buf], []).append(buf)
            self.release(pos)
            end = self.regions.get(id(s))
            if end is not None:
                self.release(end[1])

    def release(self, pos: int) -> None:
        for root in sorted(self.dying.pop(pos, [])):
            buf = self.plan.buffer_of[root]
            self.free.setdefault(self.pool.specs[buf], []).append(buf)


def plan_body(steps: list[Step], entry: list[int], results: list[int],
              specs: dict[int, TensorSpec], pool: Pool, entry_layout: str) -> Plan:
    """Plan one body. ``entry`` slots exist before it runs (variables: layout ``"C"``; function
    arguments: ``"?"``); ``results`` are returned to a caller and so escape."""
    return _Planner(steps, entry, results, specs, pool, entry_layout).plan



def swap_writes(steps: list[Step], variables: list[int], plan: Plan) -> dict[int, int]:
    """Variables whose first in-place write can go to a spare array instead: ``{id(step): slot}``.

    Such a variable is never written in its live array during a run; the Session swaps the two
    arrays when the run succeeds, so a failed run leaves it untouched without a snapshot. That
    needs the first write to be a top-level step run through ``kernel_out`` on the variable
    itself, with no in-place alias of it (an in-place view, a by-reference loop input) made
    before it: those would keep pointing at the old array.
    """
    pending = set(variables)
    top = {id(s) for s in steps}
    chosen: dict[int, int] = {}
    for s in walk(steps):
        for slot in s.writes:
            var = plan.root[slot]
            if var in pending:
                pending.discard(var)
                if id(s) in top and id(s) in plan.use_out and slot == var:
                    chosen[id(s)] = var
        src = s.alias_source
        if src is not None and s.aliases_input and s.writes == [] and plan.root[src] in pending:
            pending.discard(plan.root[src])
    return chosen
