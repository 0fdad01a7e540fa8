"""Adam chains: the steps of one Adam(W) update of a variable, found to run as one loop.

``AdamOptimizerStep`` (and programs written with ``ops.var_updates`` in its order) update a
variable with consecutive steps: ``accumulate_moving_average_`` of the first moment and
``accumulate_moving_average_square_`` of the second from one gradient, ``add_`` of the step
count, ``adam_updater`` of the new moments (and the weight) and ``scaled_add_`` of that term
into the weight. Compiled one by one they pass over memory four times (a float32 parameter:
52 bytes read and written, the gradient read twice and the term stored and read back); one
loop (``ops.adam_loops.adam_step``) reads the gradient, the moments and the weight once and
writes the moments and the weight once (28 bytes), with the four loops' bits.

``find`` returns the chains of a body of steps. The generated step (``codegen_chains.py``) runs
each at its ``scaled_add_``: nothing between the first moving average and it reads or writes
the chain's arrays (the steps are consecutive), and the term is read by the ``scaled_add_``
alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xlgraph.lower.program import Step
from xlgraph.lower.storage import Plan

__all__ = ["Chain", "find"]

_NAMES = ("accumulate_moving_average_", "accumulate_moving_average_square_", "add_",
          "adam_updater", "scaled_add_")


@dataclass(eq=False)
class Chain:
    """The five steps of one Adam update, in program order."""

    first: Step  # accumulate_moving_average_(m, g, f1)
    second: Step  # accumulate_moving_average_square_(v, g, f2)
    count: Step  # add_(step, 1): runs as its own line, before the chain's loop
    term: Step  # adam_updater(m', v', [w], step', [wd], b1, b2, eps)
    update: Step  # scaled_add_(w, term)

    @property
    def loops(self) -> tuple[Step, Step, Step, Step]:
        """The steps the chain's loop runs."""
        return self.first, self.second, self.term, self.update

    @property
    def decay(self) -> bool:
        return bool(self.term.attrs["decay"])

    def arguments(self, first: list, second: list, term: list, update: list) -> list:
        """The inputs of ``adam_loops.adam_step`` (gradient, moments, weight, factors, step,
        weight decay, betas, epsilon) from those of the loop steps (slots or their names);
        without decay, epsilon stands for the weight decay it does not read."""
        rest = term[3:] if self.decay else [term[2], term[-1], *term[3:]]
        return [first[1], first[0], second[0], update[0], first[2], second[2], *rest]


def _both(s: Step) -> tuple[int, int]:
    """The slots that hold what in-place step ``s`` wrote: its input's and its output's."""
    return s.ins[0], s.outs[0]


def _chain(steps: list[Step]) -> Chain | None:
    """The chain that ``steps`` (five consecutive steps) are, or None."""
    if any(s.kind != "kernel" or s.defn.name != n for s, n in zip(steps, _NAMES)):
        return None
    first, second, count, term, update = steps
    attrs = term.attrs
    if attrs.get("mode") != "adam" or not attrs.get("bias"):
        return None
    weight, ins = update.ins[0], term.ins
    written = [_both(first), _both(second), _both(count)]
    if (first.ins[1] != second.ins[1] or update.ins[1] != term.outs[0]
            or any(x not in w for x, w in zip([*ins[:2], ins[3 if attrs["decay"] else 2]],
                                              written))
            or (attrs["decay"] and ins[2] != weight)):
        return None
    return Chain(first, second, count, term, update)


def find(steps: list[Step], plan: Plan, ready: Callable[[Step], bool]) -> dict[Step, Chain]:
    """``{step: its chain}`` for the loop steps of the chains among ``steps`` (one body, not
    its nested bodies) whose loop steps each may run as a compiled loop (``ready``), whose term
    only the ``scaled_add_`` reads and whose gradient, moments, weight and step count are
    distinct arrays."""
    found: dict[Step, Chain] = {}
    for i in range(len(steps) - len(_NAMES) + 1):
        chain = _chain(steps[i:i + len(_NAMES)])
        if chain is None or not all(map(ready, chain.loops)):
            continue
        term = chain.term.outs[0]
        arrays = [chain.first.ins[1], chain.first.ins[0], chain.second.ins[0],
                  chain.update.ins[0], chain.count.outs[0]]
        if (plan.live.last_read.get(term) != plan.positions[chain.update]
                or plan.root[term] in plan.escaping
                or len({plan.root[x] for x in arrays}) != len(arrays)):
            continue
        found.update(dict.fromkeys(chain.loops, chain))
    return found
