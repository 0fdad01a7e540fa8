"""Copy-on-write planning: decide which shared buffers must become copies.

Views (reshape, slice, ...) and by-value call bindings share their source's buffer. That is only
safe while nobody writes to the buffer in place in a way the sharing makes visible. A shared slot
is materialised (copied when created) when

(a) an in-place op writes through it, or writes into a constant or a host-loaded array; or
(b) an in-place op writes its source's buffer while the shared slot is still to be read.
"""

from __future__ import annotations

from dataclasses import dataclass

from xlgraph.lower.liveness import Liveness


@dataclass
class _Facts:
    live: Liveness
    parent: dict[int, int]  # slot -> slot whose buffer it shares
    writes: list[tuple[int, int]]  # (position, slot written in place)


def _facts(live: Liveness) -> _Facts:
    parent = {s.outs[0]: s.alias_source for s in live.positions if s.alias_source is not None}
    return _Facts(live, parent, live.writes())


def _owned(slot: int, facts: _Facts) -> bool:
    step = facts.live.creator.get(slot)
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
    live = facts.live

    def subtree_last_read(slot: int) -> int:
        """The last read of ``slot`` or of the aliases made from it (not past an owned one)."""
        best, stack = -1, [slot]
        while stack:
            node = stack.pop()
            best = max(best, live.last_read.get(node, -1))
            stack.extend(c for c in children.get(node, ()) if not _owned(c, facts))
        return best

    for pos, target in facts.writes:
        slot = target
        while True:  # rule (a): walk up to the buffer the write really lands in
            if _owned(slot, facts):
                break
            step = live.creator.get(slot)
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
                step = live.creator[c]
                if step.cow and live.created[c] < pos < subtree_last_read(c):
                    step.copy_out = True
                    changed = True
                else:
                    stack.append(c)
    return changed


def plan_copies(live: Liveness, entry: list[int]) -> set[int]:
    """Mark the steps whose outputs must be fresh buffers; return the ``entry`` slots written.

    ``live`` is the liveness of the body; ``entry`` are the slots that exist before it runs
    (variables, or a function's arguments); the returned ones are modified in place, directly
    or through aliases.
    """
    facts = _facts(live)
    while _apply_rules_once(facts):
        pass
    return {_root(slot, facts) for _, slot in facts.writes} & set(entry)
