"""Copy-on-write planning: decide which shared buffers must become copies.

Views (reshape, slice, ...) and by-value call bindings share their source's buffer. That is only
safe while nobody writes to the buffer in place in a way the sharing makes visible. A shared slot
is materialised (copied when created) when

(a) an in-place op writes through it, or writes into a constant or a host-loaded array; or
(b) an in-place op writes its source's buffer while the shared slot is still to be read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xlgraph.lower.program import Step


@dataclass
class _Facts:
    created: dict[int, int] = field(default_factory=dict)  # slot -> position (-1: at start)
    last_read: dict[int, int] = field(default_factory=dict)  # slot -> effective last read
    creator: dict[int, Step] = field(default_factory=dict)
    parent: dict[int, int] = field(default_factory=dict)  # slot -> slot whose buffer it shares
    writes: list[tuple[int, int]] = field(default_factory=list)  # (position, slot written)


def spans(steps: list[Step], pos: int, out: dict[int, tuple[int, int]]) -> int:
    """Number steps depth-first from ``pos``; record each loop/cond's (first, last) position."""
    for s in steps:
        pos += 1
        if s.kind in ("loop", "cond"):  # a cond's arms are laid out one after the other
            start = pos
            pos = spans(s.body + s.orelse, pos, out)
            out[id(s)] = (start, pos)
    return pos


def _collect(steps: list[Step], entry: list[int]) -> _Facts:
    regions: dict[int, tuple[int, int]] = {}
    spans(steps, 0, regions)
    facts = _Facts()
    for slot in entry:
        facts.created[slot] = -1

    def read(slot: int, pos: int, loops: list[tuple[int, int]]) -> None:
        eff = pos
        for start, end in loops:  # outermost first
            if facts.created.get(slot, -1) < start:
                eff = max(eff, end)
                break
        facts.last_read[slot] = max(facts.last_read.get(slot, -1), eff)

    def walk(body: list[Step], pos: int, loops: list[tuple[int, int]]) -> int:
        for s in body:
            pos += 1
            if s.kind == "loop":
                span = regions[id(s)]
                pos = walk(s.body, pos, [*loops, span])
                for _, src in s.carried:
                    read(src, span[1], [*loops, span])
                continue
            if s.kind == "cond":  # conservative: both arms count, and reads last to the end
                span = regions[id(s)]
                read(s.ins[0], pos, loops)
                pos = walk(s.body + s.orelse, pos, [*loops, span])
                for out, srcs in zip(s.outs, s.carried):
                    for src in srcs:
                        read(src, span[1], [*loops, span])
                    facts.created[out] = span[1]
                    facts.creator[out] = s
                continue
            for slot in s.ins:
                read(slot, pos, loops)
            for slot in s.outs:
                facts.created[slot] = pos
                facts.creator[slot] = s
            if s.alias_source is not None:
                facts.parent[s.outs[0]] = s.alias_source
            facts.writes.extend((pos, slot) for slot in s.writes)
        return pos

    walk(steps, 0, [])
    return facts


def _owned(slot: int, facts: _Facts) -> bool:
    step = facts.creator.get(slot)
    return step is not None and step.copy_out


def _root(slot: int, facts: _Facts) -> int:
    while slot in facts.parent and not _owned(slot, facts):
        slot = facts.parent[slot]
    return slot


def _apply_rules_once(facts: _Facts) -> bool:
    changed = False
    children: dict[int, list[int]] = {}
    for child, par in facts.parent.items():
        children.setdefault(par, []).append(child)

    def subtree_last_read(slot: int) -> int:
        best = facts.last_read.get(slot, -1)
        for c in children.get(slot, []):
            if not _owned(c, facts):
                best = max(best, subtree_last_read(c))
        return best

    for pos, target in facts.writes:
        slot = target
        while True:  # rule (a): walk up to the buffer the write really lands in
            if _owned(slot, facts):
                break
            step = facts.creator.get(slot)
            if step is not None and step.cow:
                step.copy_out = True
                changed = True
                break
            if slot in facts.parent:
                slot = facts.parent[slot]
                continue
            if step is not None and step.kind in ("const", "host_load"):
                step.copy_out = True
                changed = True
            break
        stack = [_root(target, facts)]
        while stack:  # rule (b): shared readers of the written buffer that read it later
            node = stack.pop()
            for c in children.get(node, []):
                if _owned(c, facts):
                    continue
                step = facts.creator[c]
                if step.cow and facts.created[c] < pos < subtree_last_read(c):
                    step.copy_out = True
                    changed = True
                else:
                    stack.append(c)
    return changed


def plan_copies(steps: list[Step], entry: list[int]) -> set[int]:
    """Mark the steps whose outputs must be fresh buffers; return the ``entry`` slots written.

    ``entry`` are the slots that exist before ``steps`` run (variables, or a function's
    arguments); the returned ones are modified in place, directly or through aliases.
    """
    facts = _collect(steps, entry)
    while _apply_rules_once(facts):
        pass
    return {_root(slot, facts) for _, slot in facts.writes} & set(entry)
