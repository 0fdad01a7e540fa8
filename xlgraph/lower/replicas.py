"""Replicas in the plan: one flattened program runs every local replica at once (DESIGN §7).

A value that differs between replicas carries a leading replica axis of ``ctx.local`` entries;
a value that is the same on every replica (constants, ungrouped variables that only ever take
replica-identical updates, results computed from such values alone, all-reduces over every
replica) is held once, without that axis. ``replicate`` finds which slots vary, gives them the
replica axis in ``program.specs`` and swaps the ops of the steps that touch them for their
replicated forms (``xlgraph.lower.replica_forms``: how an op runs over the axis), so planning
and code generation run on the result unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from xlgraph.lower.program import AliasSets, Function, Program, Step, walk
from xlgraph.lower.replica_folds import fold_batch, folded_steps, smallest_input, summed_steps
from xlgraph.lower.replica_forms import (
    agree_defn,
    is_global,
    lift_defn,
    lifted,
    lifting_defn,
    one_replica_defn,
    replica_defn,
)
from xlgraph.op import Op, OpDef
from xlgraph.ops.replicas import ReplicaContext
from xlgraph.tensor import TensorSpec

__all__ = ["ReplicaContext", "loops_over_replicas", "one_replica", "replicate"]


class _Varying(AliasSets):
    """Which slots carry the replica axis: the sets of slots that share storage among
    ``steps`` (views, in-place ops, by-reference inputs), and the varying ones' roots."""

    def __init__(self, steps: Iterable[Step]) -> None:
        super().__init__(steps)
        self.roots: set[int] = set()

    def __contains__(self, slot: int) -> bool:
        return self.root(slot) in self.roots

    def mark(self, slot: int) -> bool:
        root = self.root(slot)
        if root in self.roots:
            return False
        self.roots.add(root)
        return True


def _bodies(program: Program) -> Iterator[list[Step]]:
    yield program.steps
    for fn in program.functions:
        yield fn.steps


def _kernel_varies(s: Step, vary: _Varying, total: int) -> bool:
    rule = s.defn.replica
    ins = any(x in vary for x in s.ins)
    if rule == "per_replica":
        return True
    if rule == "collective":
        return ins and not is_global(s.attrs, total)
    return ins


def _analyse(program: Program, total: int) -> _Varying:
    steps = [s for body in _bodies(program) for s in walk(body)]
    vary = _Varying(steps)
    for slot, v in program.variable_slots.items():
        if v.replica_grouping.num_groups > 1 or getattr(v, "remote", None):  # remote: per replica
            vary.mark(slot)
    changed = True
    while changed:
        changed = False
        for s in steps:
            flows: list[tuple[int, int]] = []
            if s.kind == "kernel":
                if _kernel_varies(s, vary, total):
                    for o in s.outs:
                        changed |= vary.mark(o)
            elif s.kind == "host_load":
                changed |= vary.mark(s.outs[0])
            elif s.kind in ("bind", "ref"):
                flows = [(s.ins[0], s.outs[0])]
            elif s.kind == "loop":
                flows = [(src, dst) for dst, src in s.carried]
            elif s.kind == "cond":
                flows = [(x, o) for o, pair in zip(s.outs, s.carried) for x in pair]
            elif s.kind == "func":
                flows = [*zip(s.ins, s.func.params), *zip(s.func.results, s.outs)]
            for a, b in flows:
                if a in vary:
                    changed |= vary.mark(b)
    return vary


def _summing(s: Step, total: int) -> bool:
    """Whether ``s`` adds (or averages) its input over every replica."""
    d = s.defn
    return (d.replica == "collective" and d.inplace_of is None and "new_axis" not in s.attrs
            and s.attrs.get("op") in ("add", "mean") and is_global(s.attrs, total))


def _contractions(program: Program, vary: _Varying, ctx: ReplicaContext) -> dict[Step, Step]:
    """``{all-reduce step: producer step}`` where a global sum or mean all-reduce is the only
    reader of a product whose op can sum over the replicas in one call
    (``OpDef.replicated.summed``: a weight gradient contracts the replica axis with the batch).
    The product then is held once. Only within one process: the instances of a job combine
    partial results in another order."""
    if ctx.exchange is not None:
        return {}
    steps = [s for body in _bodies(program) for s in walk(body)]
    readers: dict[int, int] = {}
    for s in steps:
        used = [*s.ins, *(x for pair in s.carried for x in pair)]
        if s.kind == "func":
            used += s.func.results
        for x in used:
            readers[x] = readers.get(x, 0) + 1
    for fn in program.functions:
        for x in fn.results:
            readers[x] = readers.get(x, 0) + 1
    producer = {o: s for s in steps if s.kind == "kernel" for o in s.outs}
    found = {}
    for s in steps:
        if s.kind != "kernel" or not _summing(s, ctx.total):
            continue
        x = s.ins[0]
        p = producer.get(x)
        if (p is None or readers.get(x) != 1 or x not in vary or vary.root(x) != x
                or len(p.outs) != 1 or p.defn.replica != "local"
                or getattr(p.defn.replicated, "summed", None) is None
                or not all(i in vary for i in p.ins)):
            continue
        vary.roots.discard(x)
        found[s] = p
    return found


def _summed_defn(defn: OpDef, ctx: ReplicaContext, ins: list[TensorSpec],
                 out: TensorSpec, scale: float) -> OpDef:
    """``defn`` summed over the replica axis (every input carries it), times ``scale``, a power
    of two applied to its smallest input: exact, as a summed form is linear in each input, so
    the bits equal those of scaling the sum, without a pass over the (larger) result."""
    full = replica_defn(defn, [True] * len(ins), [True], ins, [out], ctx)
    smallest = smallest_input(ins)

    def summed_out(*arrays: np.ndarray, out: np.ndarray, **attrs: Any) -> np.ndarray:
        if scale != 1:
            arrays = list(arrays)
            arrays[smallest] = arrays[smallest] * np.asarray(scale, arrays[smallest].dtype)
        if defn.replicated.summed(*arrays, out=out, **attrs) is None:
            np.add.reduce(full.kernel(*arrays, **attrs), 0, out=out)
        return out

    def summed(*arrays: np.ndarray, **attrs: Any) -> np.ndarray:
        return summed_out(*arrays, out=np.empty(out.shape, out.dtype.as_numpy()), **attrs)

    return defn.derived(kernel=summed, kernel_out=summed_out, loop=None, layout=None,
                        replicated=None)


def _finish_defn(defn: OpDef, divisor: int) -> OpDef:
    """A mean all-reduce whose input already holds the sum over every replica, to be divided
    by ``divisor`` (a sum, or a mean scaled already, becomes a ``ref`` step instead)."""

    def finish(x: np.ndarray, **_: Any) -> np.ndarray:
        """In place: the input is the sum, which nothing else reads."""
        return np.divide(x, np.asarray(divisor, x.dtype), out=x)

    return defn.derived(kernel=finish, inplace_of=0, kernel_out=None, loop=None,
                        replicated=None)


class _Rewriter:
    def __init__(self, program: Program, vary: _Varying, ctx: ReplicaContext) -> None:
        self.program = program
        self.vary = vary
        self.ctx = ctx
        self.one = dict(program.specs)  # one replica's specs
        self.lift = lift_defn(ctx.local)
        self.contracted = _contractions(program, vary, ctx)
        self.producers = {p: s for s, p in self.contracted.items()}

    def prescaled(self, reduce: Step) -> bool:
        """Whether the mean of a contracted all-reduce scales the summed product's input: for
        a power-of-two replica count, where that is exact."""
        total = self.ctx.total
        return reduce.attrs["op"] == "mean" and total & (total - 1) == 0

    def new_slot(self, like: int) -> int:
        """A new slot of one replica's spec of ``like``."""
        return self.fresh(self.one[like])

    def fresh(self, spec: TensorSpec) -> int:
        """A new slot of ``spec`` (without the replica axis: it is the full spec)."""
        slot = self.program.num_slots
        self.program.num_slots += 1
        self.one[slot] = spec
        return slot

    def varying(self, like: int) -> int:
        """A new slot that carries the replica axis, of one replica's spec of ``like``."""
        slot = self.new_slot(like)
        self.vary.mark(slot)
        return slot

    def lifted(self, slot: int, op: Op | None, steps: list[Step]) -> int:
        """A varying copy of uniform ``slot``, made by a step appended to ``steps``."""
        out = self.new_slot(slot)
        self.vary.mark(out)
        steps.append(Step("kernel", [slot], [out], op, self.lift, {}))
        return out

    def lift_pairs(self, pairs: list[tuple[int, int]], op: Op | None,
                   steps: list[Step]) -> list[tuple[int, int]]:
        """``(dst, src)`` pairs with each uniform ``src`` of a varying ``dst`` lifted."""
        return [(d, self.lifted(s, op, steps) if d in self.vary and s not in self.vary else s)
                for d, s in pairs]

    def body(self, steps: list[Step]) -> list[Step]:
        out: list[Step] = []
        vary = self.vary
        for s in steps:
            if s in self.contracted:
                divisor = 1 if self.prescaled(s) else self.ctx.total
                if s.attrs["op"] == "add" or divisor == 1:  # the input holds the result
                    s = Step("ref", s.ins[:1], s.outs, s.op)
                else:
                    s.defn = _finish_defn(s.defn, divisor)
            elif s in self.producers:
                scale = 1 / self.ctx.total if self.prescaled(self.producers[s]) else 1
                steps = summed_steps(s, self.one, self.ctx.local, scale, self.fresh, self.varying)
                if steps is not None:
                    out.extend(steps)
                    continue
                s.defn = _summed_defn(s.defn, self.ctx, [self.one[x] for x in s.ins],
                                      self.one[s.outs[0]], scale)
            elif s.kind == "kernel" and (any(x in vary for x in s.ins)
                                         or s.defn.replica != "local"):
                batch = fold_batch(s.defn, [x in vary for x in s.ins], [self.one[x] for x in s.ins])
                if batch is not None:
                    out.extend(folded_steps(s, batch, self.one, self.ctx.local, self.fresh))
                    continue
                s.defn = replica_defn(s.defn, [x in vary for x in s.ins],
                                      [o in vary for o in s.outs],
                                      [self.one[x] for x in s.ins],
                                      [self.one[o] for o in s.outs], self.ctx)
            elif s.kind == "kernel" and any(o in vary for o in s.outs):
                s.defn = lifting_defn(s.defn, [o in vary for o in s.outs], self.ctx.local)
            elif s.kind == "const" and s.outs[0] in vary:
                s.value = lifted(s.value, self.ctx.local)
            elif s.kind == "bind" and s.outs[0] in vary and s.ins[0] not in vary:
                s = Step("kernel", s.ins, s.outs, s.op, self.lift, {})
            elif s.kind == "func":
                s.ins = [self.lifted(x, s.op, out) if p in vary and x not in vary else x
                         for x, p in zip(s.ins, s.func.params)]
            elif s.kind == "loop":
                s.body = self.body(s.body)
                s.carried = self.lift_pairs(s.carried, s.op, s.body)
            elif s.kind == "cond":
                if s.ins[0] in vary:
                    flag = self.new_slot(s.ins[0])
                    out.append(Step("kernel", [s.ins[0]], [flag], s.op, agree_defn(s.op), {}))
                    s.ins = [flag]
                s.body, s.orelse = self.body(s.body), self.body(s.orelse)
                then = self.lift_pairs([(o, a) for o, (a, _) in zip(s.outs, s.carried)],
                                       s.op, s.body)
                other = self.lift_pairs([(o, b) for o, (_, b) in zip(s.outs, s.carried)],
                                        s.op, s.orelse)
                s.carried = [(a, b) for (_, a), (_, b) in zip(then, other)]
            out.append(s)
        return out

    def run(self) -> None:
        program = self.program
        program.steps = self.body(program.steps)
        for fn in program.functions:
            self.function(fn)
        local = self.ctx.local
        program.specs = {slot: TensorSpec((local, *spec.shape), spec.dtype, spec.meta_shape)
                         if slot in self.vary else spec for slot, spec in self.one.items()}

    def function(self, fn: Function) -> None:
        fn.steps = self.body(fn.steps)


def replicate(program: Program, ctx: ReplicaContext) -> set[int]:
    """Rewrite ``program`` (freshly flattened) to run ``ctx.local`` replicas at once; returns
    the varying slots."""
    vary = _analyse(program, ctx.total)
    _Rewriter(program, vary, ctx).run()
    return {slot for slot in program.specs if slot in vary}


def one_replica(program: Program, ctx: ReplicaContext) -> set[int]:
    """Rewrite ``program`` (freshly flattened) for an instance of one replica (``ctx.local``
    is 1) without a replica axis: every value keeps one replica's shape and every local op runs
    as in an Ir of one replica; only the ops that reach other replicas (collectives and
    per-replica ops) change, to their replicated forms around an axis of length 1. Returns the
    slots that may differ between replicas."""
    vary = _analyse(program, ctx.total)
    for s in (s for body in _bodies(program) for s in walk(body)):
        if s.kind == "kernel" and s.defn.replica != "local":
            s.defn = one_replica_defn(s.defn, replica_defn(
                s.defn, [True] * len(s.ins), [True] * len(s.outs),
                [program.specs[x] for x in s.ins], [program.specs[o] for o in s.outs], ctx))
    return {slot for slot in program.specs if slot in vary}


def loops_over_replicas(program: Program) -> list[str]:
    """Names of the ops whose steps loop their kernel over the replicas (no replicated form)."""
    return sorted({s.defn.name for body in _bodies(program) for s in walk(body)
                   if s.kind == "kernel" and getattr(s.defn.kernel, "loops", False)})
