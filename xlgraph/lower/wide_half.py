"""Wide storage: float16 values passed between float32-register ops stay in float32.

An op that computes float16 in float32 registers (``OpDef.widen_half``, ``xlgraph.ops.half``)
widens every float16 input and narrows every float16 output. Between two such ops the narrowing
and the widening cancel out but for the rounding: this pass keeps such a value as a float32 array
holding exactly the float16 value (the producer's float32 result, rounded to float16 precision
by a ``round_half`` step that fuses into compiled segments like any float32 loop), and its
consumers read it as float32: a chain of these ops plans, fuses and runs like the float32 step,
plus one rounding per result (none after ops whose results are elements of their inputs,
``OpDef.half_exact``: ``relu``, ``max_pool``, ...). Every result keeps its bits: a consumer
computes on the very float32 values it widened before, and a value narrowed from the store is
the float16 it was.

A value stays float16 where something needs its bits or its buffer: variables and constants,
values written in place or sharing a buffer with one that is (``passes.written_alias_slots``),
results of functions, anything a nested body, loop carry, branch, call, bind or host transfer
touches, outputs of ops that do not opt in (``widen_half``, or ``half_registers`` for kernels
that do it themselves: ``matmul``). A kernel of another op reading a wide value reads a
``narrow_half`` copy made just before it (exact). Views (``OpDef.half_view``: ``reshape``,
``transpose``, ``slice``, ...) of a wide value are wide; ``cast`` reads one as it is (to
float32: an ``identity`` view of it), and a ``cast`` of float32 to float16 becomes the rounding
step. The lowering skips the pass under ``enableFloatingPointChecks`` (numpy's float16 casts
there raise on overflow) and for replicated programs.
"""

from __future__ import annotations

from xlgraph import dtypes
from xlgraph.lower.passes import written_alias_slots
from xlgraph.lower.program import Program, Step, walk
from xlgraph.op import REGISTRY
from xlgraph.ops.half import wide_form
from xlgraph.ops.half_round import NARROW_HALF, ROUND_HALF, WIDEN_HALF
from xlgraph.tensor import TensorSpec

__all__ = ["widen_storage"]


def _opts_in(s: Step) -> bool:
    """A kernel step of an op that computes float16 in float32 registers. (One that writes an
    input in place reads the others: the written one and its output are never wide.)"""
    d = None if s.op is None else s.op.defn
    return (s.kind == "kernel" and d is not None and d.replica == "local" and not d.view
            and (d.widen_half or d.half_registers))


def _exact(s: Step) -> bool:
    """Whether step ``s``'s results are float16 values already (``OpDef.half_exact``)."""
    rule = s.defn.half_exact
    return rule is not None and rule(s.attrs)


def _rounds_on_store(s: Step, specs: dict[int, TensorSpec]) -> bool:
    """Whether opting-in step ``s`` has a ``loops.bits`` loop form, which rounds a result held
    in float32 as it stores each element (``wide_form``'s ``rounds``)."""
    loop = s.op.defn.loop if _opts_in(s) else None
    found = None if loop is None else loop(
        [TensorSpec(specs[x].shape, dtypes.float32) if specs[x].dtype is dtypes.float16
         else specs[x] for x in s.ins], **s.attrs)
    return found is not None and getattr(found[0], "bits", False)


def _view(s: Step) -> bool:
    """A view of its one input's elements, or a ``bind`` (the value passed into a subgraph)."""
    if s.kind == "bind":
        return True
    d = s.defn
    return (s.kind == "kernel" and d.view and d.inplace_of is None and not d.side_effect
            and d.half_view and len(s.ins) == 1)


def _cast(s: Step) -> bool:
    return s.kind == "kernel" and s.defn.name == "cast" and len(s.ins) == 1


def _accepts(s: Step, wide: set[int] | None = None) -> bool:
    """Whether kernel step ``s`` may read float32 storage for its float16 inputs: a view only
    where its output is wide too (``wide``; None: not decided yet)."""
    if _view(s):
        return wide is None or s.outs[0] in wide
    return _opts_in(s) or _cast(s)


def widen_storage(steps: list[Step], program: Program, results: list[int]) -> list[Step]:
    """``steps`` with float16 values between opting-in ops held in float32 (see the module
    docstring); ``program.specs`` gains the float32 specs; ``results`` leave the body."""
    specs = program.specs
    top = {id(s) for s in steps}
    pinned = set(results) | set(program.variable_slots) | written_alias_slots(steps)
    for s in walk(steps):
        if id(s) not in top or s.kind not in ("kernel", "const", "bind"):
            pinned.update(s.ins, s.outs)
            pinned.update(x for pair in s.carried for x in pair)
        elif s.kind == "const":
            pinned.update(s.outs)
    readers: dict[int, list[Step]] = {}
    for s in steps:
        for x in s.ins:
            readers.setdefault(x, []).append(s)

    wide: set[int] = set()
    rounded: dict[int, Step] = {}  # producer outputs made wide -> the producing step
    for s in steps:
        if _view(s) and s.ins[0] in wide:
            if s.outs[0] not in pinned:
                wide.add(s.outs[0])
            continue
        makes = s.kind == "kernel" and (
            _opts_in(s) or (_cast(s) and specs[s.ins[0]].dtype is dtypes.float32))
        if not makes:
            continue
        for o in s.outs:
            if (specs[o].dtype is dtypes.float16 and o not in pinned
                    and any(_accepts(r) and not (_view(r) and r.outs[0] in pinned)
                            for r in readers.get(o, []))):
                wide.add(o)
                rounded[o] = s
    if not wide:
        return steps

    for x in wide:
        specs[x] = TensorSpec(specs[x].shape, dtypes.float32)
    out: list[Step] = []
    narrowed: dict[int, int] = {}
    for s in steps:
        if s.kind in ("kernel", "bind") and not _accepts(s, wide) and any(
                x in wide for x in s.ins):
            for i, x in enumerate(s.ins):
                if x in wide:
                    if x not in narrowed:
                        n = _new_slot(program, x, dtypes.float16)
                        out.append(Step("kernel", [x], [n], s.op, NARROW_HALF))
                        narrowed[x] = n
                    s.ins[i] = narrowed[x]
        made = [o for o in s.outs if rounded.get(o) is s]
        if (_cast(s) and s.ins[0] in wide and specs[s.outs[0]].dtype is dtypes.float32
                and s.outs[0] not in pinned):  # the value itself: a view of it
            s.defn, s.attrs = REGISTRY["identity"], {}
        if not made or _exact(s):  # an exact op writes its wide results itself
            if _opts_in(s):
                s.defn = wide_form(s.op.defn, [specs[x] for x in s.ins],
                                   [specs[o] for o in s.outs])
            out.append(s)
            continue
        if _cast(s):  # float32 to float16, kept in float32: the rounding itself
            out.append(Step("kernel", s.ins, s.outs, s.op, ROUND_HALF))
            continue
        if _rounds_on_store(s, specs):  # its one pass rounds them, no rounding step
            s.defn = wide_form(s.op.defn, [specs[x] for x in s.ins], [specs[o] for o in s.outs],
                               tuple(o in made for o in s.outs))
            out.append(s)
            continue
        raw = {o: _new_slot(program, o, dtypes.float32) for o in made}
        s.outs = [raw.get(o, o) for o in s.outs]
        s.defn = wide_form(s.op.defn, [specs[x] for x in s.ins], [specs[o] for o in s.outs])
        out.append(s)
        out.extend(Step("kernel", [raw[o]], [o], s.op, ROUND_HALF) for o in made)
    return _widen_once(out, program)


def _widen_once(steps: list[Step], program: Program) -> list[Step]:
    """``steps`` where a float16 value that stays float16 (a variable, a host input) and that
    several float32-register steps read, itself or through views, before anything may write
    it, is widened once by a ``widen_half`` step before the first of them: they read that
    float32 copy (the views made again on it) instead of each widening its own."""
    specs = program.specs
    viewed: dict[int, Step] = {}  # a view's output -> its step
    base: dict[int, int] = {}  # a value -> the value it views, followed to the end
    reads: dict[int, list[tuple[int, Step, int]]] = {}  # base -> (position, reader, input)
    written: dict[int, int] = {}  # base -> the position of the first step that may write it
    for pos, s in enumerate(steps):
        if _view(s):
            viewed[s.outs[0]] = s
            base[s.outs[0]] = base.get(s.ins[0], s.ins[0])
            continue
        if s.kind != "kernel" or s.aliases_input:  # may write what it reads
            for x in s.ins:
                written.setdefault(base.get(x, x), pos)
            continue
        if _opts_in(s):
            for i, x in enumerate(s.ins):
                if specs[x].dtype is dtypes.float16:
                    reads.setdefault(base.get(x, x), []).append((pos, s, i))
    before: dict[int, list[Step]] = {}  # position -> steps to insert before it
    for root, found in reads.items():
        found = [r for r in found if r[0] < written.get(root, len(steps))]
        if len({id(s) for _, s, _ in found}) < 2:
            continue
        first = min(pos for pos, _, _ in found)
        wide = {root: _new_slot(program, root, dtypes.float32)}
        made = before.setdefault(first, [])
        made.append(Step("kernel", [root], [wide[root]], found[0][1].op, WIDEN_HALF))
        for _, s, i in found:
            s.ins[i] = _copy_of(s.ins[i], wide, viewed, made, program)
        for _, s, _ in found:
            s.defn = wide_form(s.op.defn, [specs[x] for x in s.ins], [specs[o] for o in s.outs])
    if not before:
        return steps
    return [t for pos, s in enumerate(steps) for t in (*before.get(pos, ()), s)]


def _copy_of(x: int, wide: dict[int, int], viewed: dict[int, Step], made: list[Step],
             program: Program) -> int:
    """The float32 copy of ``x``: in ``wide``, or the view of a copy that is, made (its step
    goes to ``made``)."""
    if x not in wide:
        v = viewed[x]
        src = _copy_of(v.ins[0], wide, viewed, made, program)
        if v.kind == "bind":  # passed into a subgraph by value: the copy itself
            wide[x] = src
        else:
            wide[x] = _new_slot(program, x, dtypes.float32)
            made.append(Step("kernel", [src], [wide[x]], v.op, v.defn, dict(v.attrs)))
    return wide[x]


def _new_slot(program: Program, x: int, dtype: dtypes.dtype) -> int:
    """A new slot of ``x``'s shape and ``dtype``."""
    program.num_slots += 1
    program.specs[program.num_slots - 1] = TensorSpec(program.specs[x].shape, dtype)
    return program.num_slots - 1
