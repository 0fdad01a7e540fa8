"""Liveness of one body of steps: when every slot is made and last read.

One pass over a body (the main program or a compiled function) numbers its steps depth first
and records, per slot, where it is created and where it is last read. Copy-on-write planning
(``alias.py``), the buffer plan (``plan.py``) and the ipu_model's memory model all read this one
result.

A read inside a loop or branch of a value made outside it counts at the end of that region (the
value must survive every iteration). A cond's outputs are created at the end of its arms. A
slot *escapes* its loop iteration when it is read after the loop or carried to the next
iteration: such values cannot live in a buffer that the next iteration reuses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xlgraph.core.trampoline import Nested, run
from xlgraph.lower.program import Step

Span = tuple[int, int]


@dataclass(eq=False)
class Liveness:
    """Positions and per-slot lifetimes of one body (entry slots are created at -1)."""

    positions: dict[Step, int] = field(default_factory=dict)  # step -> position, depth first
    regions: dict[Step, Span] = field(default_factory=dict)  # loop/cond -> (first, last)
    created: dict[int, int] = field(default_factory=dict)  # slot -> position made
    creator: dict[int, Step] = field(default_factory=dict)  # slot -> the step making it
    last_read: dict[int, int] = field(default_factory=dict)  # slot -> effective last read
    escaping: set[int] = field(default_factory=set)  # slots that leave their loop iteration
    end: int = 0  # the last position

    def writes(self) -> list[tuple[int, int]]:
        """``(position, slot)`` of every in-place write, in program order."""
        return [(pos, slot) for s, pos in self.positions.items() for slot in s.writes]


class _Walk:
    def __init__(self, steps: list[Step], entry: list[int]) -> None:
        self.live = Liveness()
        self.loop_of: dict[int, Span] = {}
        for slot in entry:
            self.live.created[slot] = -1
        self.live.end = run(self.number(steps, 0))
        run(self.scan(steps, [], []))

    def read(self, slot: int, pos: int, regions: list[Span]) -> None:
        live, eff = self.live, pos
        for start, end in regions:  # outermost first
            if live.created.get(slot, -1) < start:
                eff = max(eff, end)
                break
        live.last_read[slot] = max(live.last_read.get(slot, -1), eff)
        loop = self.loop_of.get(slot)
        if loop is not None and not loop[0] <= pos <= loop[1]:
            live.escaping.add(slot)

    def define(self, s: Step, slots: list[int], pos: int, loops: list[Span]) -> None:
        for slot in slots:
            self.live.created[slot] = pos
            self.live.creator[slot] = s
            if loops:
                self.loop_of[slot] = loops[-1]

    def number(self, steps: list[Step], pos: int) -> Nested[int]:
        """Number steps depth first from ``pos`` (a cond's arms one after the other); record
        each loop's and cond's span."""
        for s in steps:
            pos += 1
            self.live.positions[s] = pos
            if s.kind in ("loop", "cond"):
                start = pos
                pos = yield self.number(s.body + s.orelse, pos)
                self.live.regions[s] = (start, pos)
        return pos

    def scan(self, steps: list[Step], regions: list[Span], loops: list[Span]) -> Nested[None]:
        live = self.live
        for s in steps:
            pos = live.positions[s]
            if s.kind not in ("loop", "cond"):
                for slot in s.ins:
                    self.read(slot, pos, regions)
                self.define(s, s.outs, pos, loops)
                continue
            if s.kind == "cond":
                self.read(s.ins[0], pos, regions)
            span = live.regions[s]
            inner = [*regions, span]
            yield self.scan(s.body + s.orelse, inner, [*loops, span] if s.kind == "loop" else loops)
            for entry in s.carried:
                for src in (entry[1:] if s.kind == "loop" else entry):
                    self.read(src, span[1], inner)
                    if s.kind == "loop" and span[0] <= live.created.get(src, -1) <= span[1]:
                        live.escaping.add(src)
            if s.kind == "cond":
                self.define(s, s.outs, span[1], loops)


def liveness(steps: list[Step], entry: list[int]) -> Liveness:
    """The liveness of ``steps``; ``entry`` slots exist before they run."""
    return _Walk(steps, entry).live
