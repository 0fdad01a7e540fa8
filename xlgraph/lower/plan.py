"""The buffer plan: decide once where every value of a body lives at run time.

For one body of steps (the main program or a compiled function), from its liveness
(``liveness.py``, shared with copy-on-write planning and the ipu_model's memory model):

1. storage: every slot maps to its *storage root* (views, binds and in-place ops share their
   source's storage); a root's last use is the last read of any slot it stores. Values that
   leave the loop iteration that made them and function results *escape*: they stay fresh
   arrays;
2. layouts (``layouts.py``): which layout each value has and which kernels run through
   ``kernel_out``;
3. allocation: pool buffers (one per shape and dtype in use at once) for the outputs of kernels
   run through ``kernel_out``. An elementwise ufunc writes into the buffer of an input that dies
   at that step: chains of elementwise ops fuse into one scratch buffer (so does a kernel whose
   ``kernel_out`` declares ``out_may_be_input``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from xlgraph.core.trampoline import Nested, run
from xlgraph.errors import DeviceMemoryError
from xlgraph.lower.layouts import decide_layouts
from xlgraph.lower.liveness import Liveness
from xlgraph.lower.program import Step, walk
from xlgraph.lower.storage import Plan
from xlgraph.op import Op
from xlgraph.tensor import TensorSpec

Key = tuple[tuple[int, ...], np.dtype]
_END = 1 << 60  # "read after the body": function results


def key_of(spec: TensorSpec) -> Key:
    return spec.shape, np.dtype(spec.dtype.as_numpy())


def is_elementwise_ufunc(fn: object) -> bool:
    return isinstance(fn, np.ufunc) and fn.signature is None and fn.nout == 1


class Pool:
    """The buffers of one executable: ``specs[i]`` is the (shape, dtype) of buffer ``i``."""

    def __init__(self) -> None:
        self.specs: list[Key] = []
        self.first_users: list[Op | None] = []  # the op each buffer was made for, for errors

    def new(self, key: Key, op: Op | None = None) -> int:
        self.specs.append(key)
        self.first_users.append(op)
        return len(self.specs) - 1

    def allocate(self) -> list[np.ndarray]:
        """The buffers; ``DeviceMemoryError`` names the op whose buffer does not fit."""
        return [new_buffer(shape, dtype, "the output of " + (
                    op.describe() if op is not None else "an intermediate"))
                for (shape, dtype), op in zip(self.specs, self.first_users)]


def new_buffer(shape: tuple[int, ...], dtype: np.dtype, what: str,
               make: Callable[..., np.ndarray] = np.zeros) -> np.ndarray:
    """``make(shape, dtype)``; ``DeviceMemoryError`` naming ``what`` when it does not fit."""
    try:
        return make(shape, dtype)
    except (MemoryError, ValueError):  # ValueError: larger than the address space
        size = np.prod(shape, dtype=float) * np.dtype(dtype).itemsize
        raise DeviceMemoryError(f"cannot allocate {size / 2**30:.4g} GiB for a {np.dtype(dtype)} "
                                f"buffer of shape {tuple(shape)}, {what}") from None


def _storage(plan: Plan, results: list[int]) -> None:
    """Storage roots, their creation and last use, and the roots that escape."""
    live = plan.live
    for slot in live.created:
        plan.root.setdefault(slot, slot)
    for s in live.positions:  # program order: a source's root is known before its views
        src = None if s.copy_out else s.alias_source
        for slot in s.outs:
            plan.root[slot] = slot if src is None else plan.root[src]
            if src is None:
                plan.defined[slot] = live.created[slot]
    for slot, pos in live.last_read.items():
        root = plan.root[slot]
        plan.last_use[root] = max(plan.last_use.get(root, -1), pos)
    plan.escaping.update(plan.root[slot] for slot in live.escaping)
    for r in results:
        plan.escaping.add(plan.root[r])
        plan.last_use[plan.root[r]] = _END


class _Allocator:
    def __init__(self, plan: Plan, specs: dict[int, TensorSpec], pool: Pool) -> None:
        self.plan = plan
        self.live = plan.live
        self.specs = specs
        self.pool = pool
        self.free: dict[Key, list[int]] = {}
        self.dying: dict[int, list[int]] = {}

    def take(self, key: Key, op: Op | None) -> int:
        free = self.free.get(key)
        return free.pop() if free else self.pool.new(key, op)

    def give(self, root: int, buffer: int, pos: int) -> None:
        self.plan.buffer_of[root] = buffer
        end = max(self.plan.last_use.get(root, -1), pos)
        self.dying.setdefault(end, []).append(root)

    def fuse_target(self, s: Step, pos: int) -> int | None:
        """A dying input whose buffer an elementwise ufunc can write its output into."""
        fn = s.defn.kernel_out
        fusable = s.defn.elementwise and fn is not None and (is_elementwise_ufunc(fn)
                                                             or s.defn.out_may_be_input)
        if len(s.outs) != 1 or not fusable:
            return None
        key = key_of(self.specs[s.outs[0]])
        for x in s.ins:
            buf = self.plan.buffer_of.get(x)
            if (buf is not None and self.plan.root[x] == x and self.plan.last_use.get(x) == pos
                    and self.pool.specs[buf] == key):
                return x
        return None

    def allocate(self, steps: list[Step]) -> Nested[None]:
        p = self.plan
        for s in steps:
            pos = self.live.positions[s]
            scratch: list[int] = []
            if s in p.use_out and s.alias_source is None:
                target = self.fuse_target(s, pos)
                if target is not None:
                    buf = p.buffer_of[target]
                    self.dying[pos].remove(target)
                    self.give(s.outs[0], buf, pos)
                    p.fused_into[target] = s.outs[0]
                else:
                    for o in s.outs:
                        self.give(o, self.take(key_of(self.specs[o]), s.op), pos)
            elif s.kind == "const" and s.copy_out and s.outs[0] not in p.escaping:
                self.give(s.outs[0], self.take(key_of(self.specs[s.outs[0]]), s.op), pos)
            if s in p.use_out:
                n = s.defn.scratch
                scratch = [self.take(key_of(self.specs[s.outs[0]]), s.op) for _ in range(n)]
                if scratch:
                    p.scratch[s] = scratch
            if s.body or s.orelse:
                yield self.allocate(s.body + s.orelse)
            for buf in scratch:
                self.free.setdefault(self.pool.specs[buf], []).append(buf)
            self.release(pos)
            end = self.live.regions.get(s)
            if end is not None:
                self.release(end[1])

    def release(self, pos: int) -> None:
        for root in sorted(self.dying.pop(pos, [])):
            buf = self.plan.buffer_of[root]
            self.free.setdefault(self.pool.specs[buf], []).append(buf)


def plan_body(steps: list[Step], live: Liveness, entry: list[int], results: list[int],
              specs: dict[int, TensorSpec], pool: Pool, entry_layout: str) -> Plan:
    """Plan one body of liveness ``live``. ``entry`` slots exist before it runs (variables:
    layout ``"C"``; function arguments: ``"?"``); ``results`` are returned to a caller and so
    escape."""
    plan = Plan(live)
    _storage(plan, results)
    decide_layouts(steps, plan, specs, entry, entry_layout)
    run(_Allocator(plan, specs, pool).allocate(steps))
    return plan


def swap_writes(steps: list[Step], variables: list[int], plan: Plan) -> dict[Step, int]:
    """Variables whose first in-place write can go to a spare array instead: ``{step: slot}``.

    Such a variable is never written in its live array during a run; the Session swaps the two
    arrays when the run succeeds, so a failed run leaves it untouched without a snapshot. That
    needs the first write to be a top-level step run through ``kernel_out`` on the variable
    itself, with no in-place alias of it (an in-place view, a by-reference loop input) made
    before it: those would keep pointing at the old array.
    """
    pending = set(variables)
    top = set(steps)
    chosen: dict[Step, int] = {}
    for s in walk(steps):
        for slot in s.writes:
            var = plan.root[slot]
            if var in pending:
                pending.discard(var)
                if s in top and s in plan.use_out and slot == var:
                    chosen[s] = var
        src = s.alias_source
        if src is not None and s.aliases_input and s.writes == [] and plan.root[src] in pending:
            pending.discard(plan.root[src])
    return chosen
