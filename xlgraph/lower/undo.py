"""Undo records: a failed run's guarantee for variables written only in regions.

A variable that every run writes in place only through ops declaring the region they write
(``OpDef.region``: ``dynamic_update_`` into a KV cache) needs no snapshot of the whole array
before each run. Each such write first saves the region it is about to overwrite in the
step's undo list; a run that fails puts the saved regions back, newest first, and a run that
succeeds drops them. A step writes a few rows instead of the Session copying every cache once
a token.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from xlgraph.lower.plan import Plan
from xlgraph.lower.program import Step, walk
from xlgraph.op import OpDef

__all__ = ["logged_writes", "logging_kernel", "replay"]

Record = tuple[Any, Any, Any]  # (array, index of the region, the region's old values)


def logged_writes(steps: list[Step], variables: set[int], plan: Plan) -> set[Step]:
    """The steps that save what they overwrite: for each of ``variables`` whose every in-place
    write (anywhere in ``steps``) is a step declaring its region, on the variable's slot itself
    (no view or by-reference alias of it) and run through its plain kernel."""
    writers: dict[int, list[Step]] = {}
    for s in walk(steps):
        for slot in s.writes:
            root = plan.root.get(slot, slot)
            if root in variables:
                writers.setdefault(root, []).append(s)
    logged: set[Step] = set()
    for var, found in writers.items():
        if all(s.modifies == var and s.defn.region is not None and s not in plan.use_out
               for s in found):
            logged.update(found)
    return logged


def logging_kernel(defn: OpDef) -> Callable[..., Any]:
    """``defn.kernel`` taking an undo list first, where it records the region of input
    ``defn.inplace_of`` before writing it."""
    region, kernel, target = defn.region, defn.kernel, defn.inplace_of

    def run(undo: list[Record], *ins: Any, **attrs: Any) -> Any:
        x = ins[target]
        at = region(*ins, **attrs)
        undo.append((x, at, x[at].copy()))
        return kernel(*ins, **attrs)

    return run


def replay(undo: list[Record]) -> None:
    """Put every recorded region back, newest first, and empty ``undo``."""
    while undo:
        x, at, old = undo.pop()
        x[at] = old
