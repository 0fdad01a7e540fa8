"""Bias GELUs: an ``add`` and the ``gelu`` of its sum that follows it, found to run as one
loop (``ops.bias_gelu.bias_gelu32``: a transformer's ``gelu(x @ w + b)``, the sum kept for the
backward pass).

``find`` returns the pairs of a body: consecutive steps ``h = add(x, b)`` and ``gelu(h)``, both
run through their ``kernel_out``s, where the GELU writes a buffer that is neither ``h``'s nor
an operand's (the loop writes both results of each element, the sum first). The generated step
(``codegen_chains.py``) runs the pair at the GELU; the backend decides at compile time whether
the loop applies (float32, ``b`` repeated over ``x``'s rows or of its shape), else both steps
run as they would alone.
"""

from __future__ import annotations

from collections.abc import Callable

from xlgraph.lower.program import Step
from xlgraph.lower.storage import Plan

__all__ = ["find"]


def find(steps: list[Step], plan: Plan,
         ready: Callable[[Step], bool]) -> dict[Step, tuple[Step, Step]]:
    """``{step: (add, gelu)}`` for the pairs among ``steps`` (one body) whose steps may both
    run as compiled loops (``ready``)."""
    found: dict[Step, tuple[Step, Step]] = {}
    for pair in zip(steps, steps[1:]):
        add, gelu = pair
        if (add.kind != "kernel" or gelu.kind != "kernel" or add.defn.name != "add"
                or gelu.defn.name != "gelu" or gelu.ins[0] != add.outs[0]):
            continue
        written = {plan.buffer_of.get(plan.root[x]) for x in (*add.ins, *add.outs)}
        out = plan.buffer_of.get(plan.root[gelu.outs[0]])
        if ready(add) and ready(gelu) and out is not None and out not in written:
            found.update(dict.fromkeys(pair, pair))
    return found
