"""Program passes before buffer planning: constant folding and dead-step removal."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from xlgraph.core.trampoline import Nested, run
from xlgraph.lower.program import AliasSets, Function, Step, walk

FOLD_MAX_BYTES = 1 << 20  # larger folded results would cost more memory than they save time


def _own_effects(s: Step) -> bool | None:
    """Whether ``s`` itself must run even if nothing reads its outputs; None for steps whose
    effects are those of their bodies (loops, conditionals, function calls)."""
    if s.kind in ("host_load", "host_store"):
        return True  # loads advance the stream's transfer counter
    if s.kind == "kernel":
        return s.defn.side_effect or s.defn.modifies_input
    if s.kind in ("func", "loop", "cond"):
        return None
    return s.kind not in ("const", "bind", "ref")  # unknown kinds are kept


def _function_effects(fn: Function) -> bool:
    """Whether calling ``fn`` has effects, decided once per function (its steps that have
    effects are never removed, so the answer holds) without recursion."""
    if fn.effects is None:
        pending, seen, found = list(fn.steps), {id(fn)}, False
        while pending and not found:
            s = pending.pop()
            own = _own_effects(s)
            if own is not None:
                found = own
            elif s.kind == "func" and s.func.effects is not None:
                found = s.func.effects
            elif s.kind == "func":
                if id(s.func) not in seen:
                    seen.add(id(s.func))
                    pending.extend(s.func.steps)
            else:
                pending.extend(s.body + s.orelse)
        fn.effects = found
    return fn.effects


def has_effects(s: Step) -> bool:
    """Whether ``s`` must run even if nothing reads its outputs."""
    own = _own_effects(s)
    if own is not None:
        return own
    if s.kind == "func":
        return _function_effects(s.func)
    return _function_effects(Function("", [], s.body + s.orelse, []))


def remove_dead(steps: list[Step], needed: set[int]) -> list[Step]:
    """``steps`` without the ones whose outputs are never needed and that have no effects.

    ``needed`` holds the slots read after ``steps``; it gains the slots they read.
    """
    return run(_remove_dead(steps, needed))


def _remove_dead(steps: list[Step], needed: set[int]) -> Nested[list[Step]]:
    kept: list[Step] = []
    for s in reversed(steps):
        if s.kind == "loop":
            defined = {o for b in walk(s.body) for o in b.outs}
            if not (has_effects(s) or defined & needed or {d for d, _ in s.carried} & needed):
                continue
            needed.update(src for _, src in s.carried)
            s.body = yield _remove_dead(s.body, needed)
            # a carried value that neither the body nor later steps read is not carried at all
            s.carried = [(dst, src) for dst, src in s.carried if dst in needed]
        elif s.kind == "cond":
            if not (has_effects(s) or set(s.outs) & needed):
                continue
            arms = []
            for i, arm in enumerate((s.body, s.orelse)):
                arm_needed = set(needed) | {srcs[i] for srcs in s.carried}
                arms.append((yield _remove_dead(arm, arm_needed)))
                needed |= arm_needed
            s.body, s.orelse = arms
            needed.update(s.ins)
        else:
            if not (has_effects(s) or set(s.outs) & needed):
                continue
            needed.update(s.ins)
        kept.append(s)
    kept.reverse()
    return kept


def written_alias_slots(steps: list[Step]) -> set[int]:
    """Slots that share a buffer (through views, binds, in-place ops) with a slot written in
    place somewhere in ``steps``; their values are not fixed at creation."""
    aliases = AliasSets(walk(steps), copies=True)
    slots = {x for s in walk(steps) for x in (*s.ins, *s.outs)}
    roots = {aliases.root(w) for s in walk(steps) for w in s.writes}
    return {x for x in slots if aliases.root(x) in roots}


def _foldable(s: Step, values: dict[int, np.ndarray], unstable: set[int]) -> bool:
    d = s.defn
    return (s.kind == "kernel" and not d.side_effect and d.inplace_of is None
            and all(i in values and i not in unstable for i in s.ins))


def _fold(s: Step, values: dict[int, np.ndarray], specs: Callable[[int], object]) -> list[Step]:
    """``s`` evaluated at lowering time as ``const`` steps, or ``[s]`` when it cannot be."""
    try:
        result = s.defn.kernel(*[values[i] for i in s.ins], **s.attrs)
    except Exception:  # noqa: BLE001 - leave the failure to run time, where it names the op
        return [s]
    results = list(result) if isinstance(result, tuple) else [result]
    results = [np.asarray(r) if isinstance(r, np.generic) else r for r in results]
    if not all(isinstance(r, np.ndarray) for r in results):
        return [s]
    arrays = [np.array(r, copy=True) for r in results]
    if sum(a.nbytes for a in arrays) > FOLD_MAX_BYTES:
        return [s]
    for slot, a in zip(s.outs, arrays):
        spec = specs(slot)
        if a.shape != spec.shape or a.dtype != spec.dtype.as_numpy():
            return [s]
    for slot, a in zip(s.outs, arrays):
        values[slot] = a
    return [Step("const", [], [slot], s.op, value=a) for slot, a in zip(s.outs, arrays)]


def fold_constants(steps: list[Step], specs: Callable[[int], object],
                   unstable: set[int], values: dict[int, np.ndarray] | None = None) -> list[Step]:
    """Replace kernel steps whose inputs are all constants by ``const`` steps of their results.

    The kernels are the ops' own, so folded values are exactly what the step would compute.
    ``unstable`` slots (written in place somewhere) are never treated as known.
    """
    return run(_fold_constants(steps, specs, unstable, {} if values is None else values))


def _fold_constants(steps: list[Step], specs: Callable[[int], object], unstable: set[int],
                    values: dict[int, np.ndarray]) -> Nested[list[Step]]:
    out: list[Step] = []
    for s in steps:
        if s.kind == "const" and s.outs[0] not in unstable:
            values[s.outs[0]] = s.value
        elif _foldable(s, values, unstable):
            out.extend(_fold(s, values, specs))
            continue
        if s.body:
            s.body = yield _fold_constants(s.body, specs, unstable, values)
        if s.orelse:
            s.orelse = yield _fold_constants(s.orelse, specs, unstable, values)
        out.append(s)
    return out
