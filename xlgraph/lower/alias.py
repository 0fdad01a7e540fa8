"""Copy-on-write planning: decide which shared buffers must become copies.

Views (reshape, slice, ...) and by-value call bindings share their source's buffer. That is only
safe while nobody writes to the buffer in place in a way the sharing makes visible. A shared slot
is materialised (copied when created) when

(a) an in-place op writes through it, or writes into a constant or a host-loaded array; or
(b) an in-place op writes its source's buffer while the shared slot is still to be read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xlgraph.lower.program import Program, Step


@dataclass
class _Facts:
    created: dict[int, int] = field(default_factory=dict)  # slot -> position (-1: at start)
    last_read: dict[int, int] = field(default_factory=dict)  # slot -> effective last read
    creator: dict[int, Step] = field(default_factory=dict)
    parent: dict[int, int] = field(default_factory=dict)  # slot -> slot whose buffer it shares
    writes: list[tuple[int, int]] = field(default_factory=list)  # (position, slot written)


def _spans(steps: list[Step], pos: int, spans: dict[int, tuple[int, int]]) -> int:
    for s in steps:
        pos += 1
        if s.kind == "loop":
            start = pos
            pos = _spans(s.body, pos, spans)
            spans[id(s)] = (start, pos)
    return pos


def _collect(program: Program) -> _Facts:
    spans: dict[int, tuple[int, int]] = {}
    _spans(program.steps, 0, spans)
    facts = _Facts()
    for slot in [*program.variable_slots, *program.constant_slots]:
        facts.created[slot] = -1

    def read(slot: int, pos: int, loops: list[tuple[int, int]]) -> None:
        eff = pos
        for start, end in loops:  # outermost first
            if facts.created.get(slot, -1) < start:
                eff = max(eff, end)
                break
        facts.last_read[slot] = max(facts.last_read.get(slot, -1), eff)

    def walk(steps: list[Step], pos: int, loops: list[tuple[int, int]]) -> int:
        for s in steps:
            pos += 1
            if s.kind == "loop":
                span = spans[id(s)]
                pos = walk(s.body, pos, [*loops, span])
                for _, src in s.carried:
                    read(src, span[1], [*loops, span])
                continue
            for slot in s.ins:
                read(slot, pos, loops)
            for slot in s.outs:
                facts.created[slot] = pos
                facts.creator[slot] = s
            if s.cow or s.aliases_input:
                src = s.ins[s.defn.inplace_of] if s.aliases_input else s.ins[0]
                facts.parent[s.outs[0]] = src
            if s.modifies is not None:
                facts.writes.append((pos, s.modifies))
        return pos

    walk(program.steps, 0, [])
    return facts


def _owned(slot: int, facts: _Facts, program: Program) -> bool:
    step = facts.creator.get(slot)
    return step is not None and step.copy_out or slot in program.copy_constants


def _materialise(slot: int, facts: _Facts, program: Program) -> None:
    if slot in program.constant_slots:
        program.copy_constants.add(slot)
    else:
        facts.creator[slot].copy_out = True


def _root(slot: int, facts: _Facts, program: Program) -> int:
    while slot in facts.parent and not _owned(slot, facts, program):
        slot = facts.parent[slot]
    return slot


def _apply_rules_once(program: Program, facts: _Facts) -> bool:
    changed = False
    children: dict[int, list[int]] = {}
    for child, par in facts.parent.items():
        children.setdefault(par, []).append(child)

    def subtree_last_read(slot: int) -> int:
        best = facts.last_read.get(slot, -1)
        for c in children.get(slot, []):
            if not _owned(c, facts, program):
                best = max(best, subtree_last_read(c))
        return best

    for pos, target in facts.writes:
        slot = target
        while True:  # rule (a): walk up to the buffer the write really lands in
            if _owned(slot, facts, program):
                break
            step = facts.creator.get(slot)
            if step is not None and step.cow:
                _materialise(slot, facts, program)
                changed = True
                break
            if slot in facts.parent:
                slot = facts.parent[slot]
                continue
            if slot in program.constant_slots or (step is not None and step.kind == "host_load"):
                _materialise(slot, facts, program)
                changed = True
            break
        root = _root(target, facts, program)
        stack = [root]
        while stack:  # rule (b): shared readers of the written buffer that read it later
            node = stack.pop()
            for c in children.get(node, []):
                if _owned(c, facts, program):
                    continue
                step = facts.creator[c]
                if step.cow and facts.created[c] < pos < subtree_last_read(c):
                    _materialise(c, facts, program)
                    changed = True
                else:
                    stack.append(c)
    return changed


def plan_copies(program: Program) -> None:
    """Mark the steps (and constants) whose outputs must be fresh buffers."""
    facts = _collect(program)
    while _apply_rules_once(program, facts):
        pass
