"""The executable plan: an Ir flattened into steps over numbered value slots."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xlgraph.op import Op, OpDef
from xlgraph.tensor import TensorSpec


@dataclass(eq=False)
class Step:
    """One action of the plan.

    kinds: ``kernel`` (run ``defn.kernel``), ``const`` (the array ``value``; one step per
    constant per graph execution), ``bind`` (pass a value into a subgraph by value),
    ``host_load``, ``host_store``, ``loop`` (run ``body`` ``count`` times; after each iteration
    slot ``dst`` takes the value of slot ``src`` for every ``(dst, src)`` in ``carried``),
    ``cond`` (run ``body`` when slot ``ins[0]`` is true, else ``orelse``; then ``outs[i]`` takes a
    copy of slot ``carried[i][0]`` or ``carried[i][1]``, the branch output that ran),
    ``func`` (call the separately compiled ``func`` on ``ins``; its results are fresh arrays),
    ``ref`` (the output is the input's buffer under a new slot: a by-reference loop input).
    """

    kind: str
    ins: list[int]
    outs: list[int]
    op: Op | None = None
    defn: OpDef | None = None
    attrs: dict[str, Any] = field(default_factory=dict)
    body: list[Step] = field(default_factory=list)
    count: int = 1
    carried: list[tuple[int, int]] = field(default_factory=list)
    orelse: list[Step] = field(default_factory=list)
    copy_out: bool = False  # materialise the output as a fresh buffer (copy-on-write)
    value: np.ndarray | None = None  # kind "const"
    func: Function | None = None  # kind "func"

    @property
    def cow(self) -> bool:
        """The output shares the input's buffer but must behave like a copy."""
        return self.kind == "bind" or (
            self.kind == "kernel" and self.defn.view and self.defn.inplace_of is None
        )

    @property
    def aliases_input(self) -> bool:
        """The output is the input's buffer itself (in-place ops and in-place views)."""
        return self.kind == "ref" or (self.kind == "kernel" and self.defn.inplace_of is not None)

    @property
    def alias_source(self) -> int | None:
        """The input slot whose buffer output 0 shares (copy-on-write or aliasing), if any."""
        if self.cow or self.aliases_input:
            return self.ins[self.defn.inplace_of or 0] if self.kind == "kernel" else self.ins[0]
        return None

    @property
    def modifies(self) -> int | None:
        """Slot written in place by this kernel step, if any."""
        if self.kind == "kernel" and self.defn.modifies_input:
            return self.ins[self.defn.inplace_of]
        return None

    @property
    def writes(self) -> list[int]:
        """Every slot this step writes in place."""
        slot = self.modifies
        return [] if slot is None else [slot]

    @property
    def bodies(self) -> list[list[Step]]:
        """Nested step lists (loop body, branch arms)."""
        return [b for b in (self.body, self.orelse) if b]


@dataclass(eq=False)
class Function:
    """A subgraph compiled once as its own Python function (large or called from many sites).

    ``params`` are the slots of its arguments (caller buffers, all passed by value: ``bind``
    steps at the start of ``steps`` share them copy-on-write), ``results`` the slots it returns
    (as fresh arrays, so a function never modifies or exposes its caller's buffers).
    """

    name: str
    params: list[int]
    steps: list[Step]
    results: list[int]
    effects: bool | None = None  # whether running it has effects (``passes.has_effects``)
    height: int = 1  # Python frames a call takes at run time: 1 + its callees' deepest


@dataclass(eq=False)
class Program:
    """Steps of the main graph plus where each slot's initial value comes from."""

    steps: list[Step]
    num_slots: int
    variable_slots: dict[int, Any]  # slot -> Variable
    constant_slots: dict[int, Any]  # slot -> Constant (one slot per constant per graph instance)
    specs: dict[int, TensorSpec] = field(default_factory=dict)
    functions: list[Function] = field(default_factory=list)

    def walk(self, steps: list[Step] | None = None) -> Iterator[Step]:
        """Every step, loop and branch bodies included, in program order."""
        yield from walk(self.steps if steps is None else steps)


class AliasSets:
    """Slots that share storage, as a union-find over the steps' ``alias_source`` (views,
    by-value binds, in-place results): ``root`` names a slot's set. ``copies``: a step that
    copies its output (``copy_out``) joins its source's set too."""

    def __init__(self, steps: Iterable[Step] = (), copies: bool = False) -> None:
        self.parent: dict[int, int] = {}
        for s in steps:
            if s.alias_source is not None and (copies or not s.copy_out):
                self.join(s.outs[0], s.alias_source)

    def root(self, slot: int) -> int:
        while self.parent.get(slot, slot) != slot:
            slot = self.parent[slot]
        return slot

    def join(self, a: int, b: int) -> None:
        """Merge the set of ``a`` into the set of ``b``."""
        ra, rb = self.root(a), self.root(b)
        if ra != rb:
            self.parent[ra] = rb


def walk(steps: list[Step]) -> Iterator[Step]:
    """Every step of ``steps``, nested bodies included, in program order (an explicit stack:
    any nesting depth)."""
    stack = [iter(steps)]
    while stack:
        s = next(stack[-1], None)
        if s is None:
            stack.pop()
            continue
        yield s
        if s.orelse:
            stack.append(iter(s.orelse))
        if s.body:
            stack.append(iter(s.body))
