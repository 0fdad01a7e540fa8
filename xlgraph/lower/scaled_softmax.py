"""Scaled softmaxes: attention's ``softmax(scores * c + mask)`` and, in its backward pass,
``softmax_grad(dy, p) * c``, found to run as one loop each
(``ops.softmax_loops.scaled_masked_softmax32``, ``scaled_softmax_grad_rows``) instead of
passes over the scores for each step.

``find`` returns the folds of a body: consecutive steps ``t = mul(s, c)``, ``u = add(t, mask)``
and ``p = softmax(u)``, or ``g = softmax_grad(dy, p)`` and ``mul(g, c)``, all run through their
``kernel_out``s, where each intermediate keeps the first step's spec, is read by the next step
alone and does not leave the step, and the last step's result is not written to the buffer of
an input. The generated step (``codegen_chains.py``) runs the fold at its last step; the
backend decides at compile time whether the loop applies (``c`` of one element; forward:
float32, the mask's rows repeating over the scores' leading axes; the softmax along the last
axis), else the steps run as they would alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from xlgraph.lower.program import Step
from xlgraph.lower.storage import Plan
from xlgraph.ops.softmax_loops import scaled_masked_softmax_loop, scaled_softmax_grad_loop

__all__ = ["Fold", "find"]


@dataclass(eq=False)
class Fold:
    """Consecutive ``steps`` run as one call of ``loop`` (a loop-form function of the read
    inputs' specs and ``attrs``): it reads ``inputs`` (``(step, input)`` positions, in the
    loop's order) and writes the last step's result; ``prefix`` names the call."""

    steps: list[Step]
    loop: Callable[..., Any]
    prefix: str
    inputs: list[tuple[int, int]]
    attrs: dict[str, Any]


# op names, the loop form, the call's name, the inputs it reads, the step whose attributes
_FORMS = ((["mul", "add", "softmax"], scaled_masked_softmax_loop, "scaled_softmax",
           [(0, 0), (0, 1), (1, 1)], 2),
          (["softmax_grad", "mul"], scaled_softmax_grad_loop, "scaled_softmax_grad",
           [(0, 0), (0, 1), (1, 1)], 0))


def find(steps: list[Step], plan: Plan, specs: dict,
         ready: Callable[[Step], bool]) -> dict[Step, Fold]:
    """``{step: its fold}`` for the folds among ``steps`` (one body) whose softmax (or
    gradient) may run as its compiled loop (``ready``)."""
    found: dict[Step, Fold] = {}
    for at in range(len(steps)):
        for names, loop, prefix, inputs, attrs in _FORMS:
            chain = steps[at:at + len(names)]
            if [x.defn.name if x.kind == "kernel" else None for x in chain] != names:
                continue
            middle = [x.outs[0] for x in chain[:-1]]  # read by the next step alone
            last = plan.buffer_of.get(plan.root[chain[-1].outs[0]])
            if (any(nxt.ins[0] != t or specs[t] != specs[middle[0]]
                    or plan.live.last_read.get(t) != plan.positions[nxt]
                    or plan.root[t] in plan.escaping for t, nxt in zip(middle, chain[1:]))
                    or not specs[chain[0].ins[0]] == specs[chain[-1].outs[0]] == specs[middle[0]]
                    or not ready(chain[attrs]) or not all(_plain(x, plan) for x in chain)
                    or any(plan.buffer_of.get(plan.root[chain[s].ins[i]]) == last
                           for s, i in inputs) or any(x in found for x in chain)):
                continue
            fold = Fold(chain, loop, prefix, inputs, chain[attrs].attrs)
            found.update(dict.fromkeys(chain, fold))
    return found


def _plain(s: Step, plan: Plan) -> bool:
    """Whether ``s`` runs through its ``kernel_out`` on C-contiguous inputs, none copied or
    made dense first (as a loop reads them)."""
    return (s in plan.use_out and s not in plan.copies and not plan.densify.get(s)
            and all(plan.layout.get(x) == "C" for x in s.ins))
