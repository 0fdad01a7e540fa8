"""The generated step's control flow: device loops, conditional branches, and the dispatch of
each step to its statement (``codegen_statements.py``) or block.
"""

from __future__ import annotations

from xlgraph.lower.codegen_chains import Chains
from xlgraph.lower.program import Step

__all__ = ["Loops"]


class Loops(Chains):
    """``Chains`` plus ``for`` loops and ``if``/``else`` branches, nested to any depth."""

    def step(self, s: Step, indent: int) -> None:
        k = s.kind
        if k == "loop":
            self.loop(s, indent)
        elif k == "cond":
            self.emit(indent, f"if {self.names[s.ins[0]]}.item():", s.op)
            self.branch(s.body, [(o, src[0]) for o, src in zip(s.outs, s.carried)], indent + 1)
            self.emit(indent, "else:")
            self.branch(s.orelse, [(o, src[1]) for o, src in zip(s.outs, s.carried)], indent + 1)
        else:
            self.statement(s, indent)

    def loop(self, s: Step, indent: int) -> None:
        var = self.loop_vars.get(s, "_")
        self.emit(indent, f"for {var} in range({s.count}):", s.op)
        self.body_chains(s.body)
        for inner in s.body:
            self.step(inner, indent + 1)
        if s.carried:
            dst = ", ".join(f"s{d}" for d, _ in s.carried)
            src = ", ".join(self.names[r] for _, r in s.carried)
            self.emit(indent + 1, f"{dst} = {src}")
        elif not s.body:
            self.emit(indent + 1, "pass")
        self.segments.flush()

    def branch(self, body: list[Step], results: list[tuple[int, int]], indent: int) -> None:
        """One arm of a ``cond``: its steps, then a fresh copy of each result in the output."""
        self.body_chains(body)
        for inner in body:
            self.step(inner, indent)
        for dst, src in results:
            self.emit(indent, f"s{dst} = np.array({self.names[src]})")
            self.names[dst] = f"s{dst}"
        if not body and not results:
            self.emit(indent, "pass")
        self.segments.flush()
