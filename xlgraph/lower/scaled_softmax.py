"""Scaled, masked softmaxes: attention's ``softmax(scores * c + mask)``, found to run as one
loop (``ops.softmax_loops.scaled_masked_softmax32``) instead of three passes over the scores.

``find`` returns the triples of a body: consecutive steps ``t = mul(s, c)``, ``u = add(t,
mask)`` and ``p = softmax(u)``, all run through their ``kernel_out``s, where ``t`` and ``u``
keep ``s``'s spec, each is read by the next step alone and neither leaves the step, and ``p``
is not written to the buffer of ``s``, ``c`` or ``mask``. The generated step
(``codegen_chains.py``) runs the triple at the softmax; the backend decides at compile time
whether the loop applies (float32, ``c`` of one element, the mask's rows repeating over the
scores' leading axes, the softmax along the last axis), else the steps run as they would alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from xlgraph.lower.program import Step
from xlgraph.lower.storage import Plan

__all__ = ["ScaledSoftmax", "find"]

_NAMES = ["mul", "add", "softmax"]


class ScaledSoftmax(NamedTuple):
    """``t = mul(s, c)``, ``u = add(t, mask)``, ``p = softmax(u)``."""

    mul: Step
    add: Step
    softmax: Step


def find(steps: list[Step], plan: Plan, specs: dict,
         ready: Callable[[Step], bool]) -> dict[Step, ScaledSoftmax]:
    """``{step: its triple}`` for the triples among ``steps`` (one body) whose softmax may
    run as its compiled loop (``ready``)."""
    found: dict[Step, ScaledSoftmax] = {}
    for at in range(2, len(steps)):
        mul, add, softmax = triple = steps[at - 2:at + 1]
        if [x.defn.name if x.kind == "kernel" else None for x in triple] != _NAMES:
            continue
        (s, c), (t, mask), (u,) = mul.ins, add.ins, softmax.ins
        read = {plan.buffer_of.get(plan.root[x]) for x in (s, c, mask)}
        if (t != mul.outs[0] or u != add.outs[0] or not specs[s] == specs[t] == specs[u]
                or not ready(softmax) or not all(_plain(x, plan) for x in (mul, add))
                or plan.live.last_read.get(t) != plan.positions[add]
                or plan.live.last_read.get(u) != plan.positions[softmax]
                or plan.root[t] in plan.escaping or plan.root[u] in plan.escaping
                or plan.buffer_of.get(plan.root[softmax.outs[0]]) in read):
            continue
        found.update(dict.fromkeys(triple, ScaledSoftmax(*triple)))
    return found


def _plain(s: Step, plan: Plan) -> bool:
    """Whether ``s`` runs through its ``kernel_out`` on C-contiguous inputs, none copied or
    made dense first (as a loop reads them)."""
    return (s in plan.use_out and s not in plan.copies and not plan.densify.get(s)
            and all(plan.layout.get(x) == "C" for x in s.ins))
