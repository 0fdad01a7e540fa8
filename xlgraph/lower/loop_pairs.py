"""Loop pairs: an op and the next step, which reads its result, found to run as one loop
(``ops.pair_loops``: a bias add and the GELU of its sum; the GELU's gradient and its sum over
rows).

``find`` returns the pairs of a body: consecutive steps ``h = first(...)`` and
``second(h)`` named in ``ops.pair_loops.PAIRS``, both run through their ``kernel_out``s, where
the second writes a buffer that is none of the first's operands' or results' (the loop writes
both results of each row, the first's first). The generated step (``codegen_chains.py``) runs
the pair at its second step; the backend decides at compile time whether the loop applies
(float32, the shapes the two loops take), else both steps run as they would alone.
"""

from __future__ import annotations

from collections.abc import Callable

from xlgraph.core.op import REGISTRY
from xlgraph.lower.program import Step
from xlgraph.lower.storage import Plan
from xlgraph.ops.pair_loops import PAIRS

__all__ = ["find"]


def find(steps: list[Step], plan: Plan,
         ready: Callable[[Step], bool]) -> dict[Step, tuple[Step, Step]]:
    """``{step: (first, second)}`` for the pairs among ``steps`` (one body) whose steps may
    both run as compiled loops (``ready``)."""
    found: dict[Step, tuple[Step, Step]] = {}
    for pair in zip(steps, steps[1:]):
        first, second = pair
        if (first.kind != "kernel" or second.kind != "kernel" or second.ins != first.outs[:1]
                or (first.defn.name, second.defn.name) not in PAIRS
                or any(s.defn is not REGISTRY[s.defn.name] for s in pair)):
            continue  # a derived form (over a replica axis, say) is not the loop's op
        written = {plan.buffer_of.get(plan.root[x]) for x in (*first.ins, *first.outs)}
        out = plan.buffer_of.get(plan.root[second.outs[0]])
        if ready(first) and ready(second) and out is not None and out not in written:
            found.update(dict.fromkeys(pair, pair))
    return found
