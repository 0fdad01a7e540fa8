"""The executable plan: an Ir flattened into steps over numbered value slots."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from xlgraph.op import Op, OpDef


@dataclass(eq=False)
class Step:
    """One action of the plan.

    kinds: ``kernel`` (run ``defn.kernel``), ``bind`` (pass a value into a subgraph by value),
    ``host_load``, ``host_store``, ``loop`` (run ``body`` ``count`` times; after each iteration
    slot ``dst`` takes the value of slot ``src`` for every ``(dst, src)`` in ``carried``).
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
    copy_out: bool = False  # materialise the output as a fresh buffer (copy-on-write)

    @property
    def cow(self) -> bool:
        """The output shares the input's buffer but must behave like a copy."""
        return self.kind == "bind" or (
            self.kind == "kernel" and self.defn.view and self.defn.inplace_of is None
        )

    @property
    def aliases_input(self) -> bool:
        """The output is the input's buffer itself (in-place ops and in-place views)."""
        return self.kind == "kernel" and self.defn.inplace_of is not None

    @property
    def modifies(self) -> int | None:
        """Slot written in place by this step, if any."""
        if self.kind == "kernel" and self.defn.modifies_input:
            return self.ins[self.defn.inplace_of]
        return None


@dataclass(eq=False)
class Program:
    """Steps of the main graph plus where each slot's initial value comes from."""

    steps: list[Step]
    num_slots: int
    variable_slots: dict[int, Any]  # slot -> Variable
    constant_slots: dict[int, Any]  # slot -> Constant
    outputs_of_main: list[int] = field(default_factory=list)
    copy_constants: set[int] = field(default_factory=set)

    def walk(self, steps: list[Step] | None = None):
        """Every step, loop bodies included, in program order."""
        for s in self.steps if steps is None else steps:
            yield s
            if s.kind == "loop":
                yield from self.walk(s.body)
