"""Embedding pairs: ``gather_grad`` along axis 0 and the ``add`` that is its one reader, found
to run as one loop (``ops.embedding_loops.gather_grad_add``: a tied embedding's gradient).

``find`` returns the pairs of a body: consecutive steps ``g = gather_grad(dy, indices)`` and
``add(a, g)`` (``g`` second: numpy's ``add`` keeps the first operand's NaN) of one spec, run
through their ``kernel_out``s, where the ``add`` is the last read of ``g`` and writes a buffer
other than ``g``'s. The generated step (``codegen_chains.py``) runs the pair at the ``add``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xlgraph.lower.program import Step
from xlgraph.lower.storage import Plan

__all__ = ["Pair", "find"]


@dataclass(eq=False)
class Pair:
    """``grad = gather_grad(dy, indices)`` and ``total = add(a, grad)``."""

    grad: Step
    total: Step


def find(steps: list[Step], plan: Plan, ready: Callable[[Step], bool],
         specs: dict) -> dict[Step, Pair]:
    """``{step: its pair}`` for the pairs among ``steps`` (one body) whose ``gather_grad`` may
    run as its compiled loop (``ready``)."""
    found: dict[Step, Pair] = {}
    for grad, total in zip(steps, steps[1:]):
        if not (grad.kind == total.kind == "kernel" and grad.defn.name == "gather_grad"
                and total.defn.name == "add" and grad.attrs["axis"] == 0):
            continue
        g = grad.outs[0]
        if (total.ins[1] != g or plan.root[total.ins[0]] == plan.root[g]
                or specs[total.ins[0]] != specs[g]
                or specs[total.outs[0]] != specs[g] or not ready(grad)
                or total not in plan.use_out or plan.layout.get(total.ins[0]) != "C"
                or total in plan.copies or plan.densify.get(total)
                or plan.live.last_read.get(g) != plan.positions[total]
                or plan.root[g] in plan.escaping
                or plan.buffer_of.get(plan.root[total.outs[0]]) == plan.buffer_of.get(g)):
            continue
        found.update(dict.fromkeys((grad, total), Pair(grad, total)))
    return found
