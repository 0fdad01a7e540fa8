"""Adam chains: the steps of one Adam(W) update of a variable, found to run as one loop.

``AdamOptimizerStep`` (and programs written with ``ops.var_updates`` in its order) update a
variable with consecutive steps: ``accumulate_moving_average_`` of the first moment and
``accumulate_moving_average_square_`` of the second from one gradient, ``add_`` of the step
count, ``adam_updater`` of the new moments (and the weight) and ``scaled_add_`` of that term
into the weight. Compiled one by one they pass over memory four times (a float32 parameter:
52 bytes read and written, the gradient read twice and the term stored and read back); one
loop (``ops.adam_loops.adam_step``) reads the gradient, the moments and the weight once and
writes the moments and the weight once (28 bytes), with the four loops' bits.

With float16 state, as wide storage leaves it (``lower.wide_half``: the optimiser tutorial's
float16 first moment, ``AdamOptimizerStep`` on float16 weights), the chain may start with the
``round_half`` of the gradient that the first moment reads (its cast to float16), have casts of
float16 moments or weight to float32 before the term, and pass the term to the ``scaled_add_``
through its cast to float16 (``round_half``) or back to float32 (``identity``); the loop
rounds the gradient and the term to float16 precision in registers and reads and writes
float16 arrays as their bits.

``find`` returns the chains of a body of steps. The generated step (``codegen_chains.py``) runs
each at its ``scaled_add_``: nothing between the first moving average and it reads or writes
the chain's arrays (the steps are consecutive), and the term is read by the ``scaled_add_``
alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xlgraph import dtypes
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
    rounding: Step | None = None  # round_half(g): the float16 gradient the first moment reads
    after: Step | None = None  # the term cast to float16 (round_half) or back (identity)
    casts: tuple[Step, ...] = ()  # float16 moments or weight cast to float32 for the term

    @property
    def loops(self) -> tuple[Step, Step, Step, Step]:
        """The op steps the chain's loop runs."""
        return self.first, self.second, self.term, self.update

    @property
    def rounds_term(self) -> bool:
        """The ``scaled_add_`` reads the term rounded to float16 precision."""
        return _is(self.after, "round_half") or self.term.op.outputs[0].dtype is dtypes.float16

    @property
    def held(self) -> tuple[Step, ...]:
        """The steps that write no line of their own (the loop runs them), in program order."""
        rounding = () if self.rounding is None else (self.rounding,)
        after = (self.after,) if _is(self.after, "round_half") else ()
        return (*rounding, self.first, self.second, *self.casts, self.term, *after, self.update)

    @property
    def decay(self) -> bool:
        return bool(self.term.attrs["decay"])

    def arguments(self, first: list, second: list, term: list, update: list) -> list:
        """The inputs of ``adam_loops.adam_step`` (gradient, moments, weight, factors, step,
        weight decay, betas, epsilon) from those of the loop steps (slots or their names);
        without decay, epsilon stands for the weight decay it does not read."""
        rest = term[3:] if self.decay else [term[2], term[-1], *term[3:]]
        return [second[1], first[0], second[0], update[0], first[2], second[2], *rest]


def _both(s: Step) -> tuple[int, int]:
    """The slots that hold what in-place step ``s`` wrote: its input's and its output's."""
    return s.ins[0], s.outs[0]


def _is(s: Step | None, name: str) -> bool:
    return s is not None and s.kind == "kernel" and s.defn.name == name


def _widening(s: Step) -> bool:
    """A cast of a float16 value to float32 (exact: the loop reads the float16 bits)."""
    return (_is(s, "cast") and len(s.ins) == 1 and s.op is not None
            and s.op.inputs[0].dtype is dtypes.float16
            and s.op.outputs[0].dtype is dtypes.float32)


def _chain(steps: list[Step], i: int) -> Chain | None:
    """The chain whose first moving average is ``steps[i]``, or None. Between the second
    moving average and the term: the step count's ``add_`` and casts of float16 values the
    term reads to float32; between the term and the ``scaled_add_``, its cast to float16
    (``round_half``) or back to float32 (``identity``)."""
    rounding = steps[i - 1] if i > 0 and _is(steps[i - 1], "round_half") else None
    j, casts = i + 2, []
    while j < len(steps) and (_widening(steps[j]) or _is(steps[j], "add_")):
        casts.append(steps[j])
        j += 1
    counts = [c for c in casts if _is(c, "add_")]
    after = steps[j + 1] if j + 1 < len(steps) and (
        _is(steps[j + 1], "identity") or _is(steps[j + 1], "round_half")) else None
    loop = [*steps[i:i + 2], *counts, *steps[j:j + 1],
            *steps[j + 1 + (after is not None):][:1]]
    if len(counts) != 1 or len(loop) != 5 or not all(map(_is, loop, _NAMES)):
        return None
    first, second, count, term, update = loop
    casts = [c for c in casts if c is not count]
    attrs = term.attrs
    if attrs.get("mode") != "adam" or not attrs.get("bias"):
        return None
    widened = {c.outs[0]: c.ins[0] for c in casts}
    weight, ins = update.ins[0], [widened.get(x, x) for x in term.ins]
    written = [_both(first), _both(second), _both(count)]
    grad = first.ins[1] if rounding is None else rounding.ins[0]
    if rounding is not None and rounding.outs[0] != first.ins[1]:
        rounding = None  # another value's rounding: the first moment reads its own gradient
        grad = first.ins[1]
    term_as = term.outs[0] if after is None else after.outs[0]
    if (grad != second.ins[1] or update.ins[1] != term_as
            or (after is not None and after.ins[0] != term.outs[0])
            or set(widened) - set(term.ins)
            or any(x not in w for x, w in zip([*ins[:2], ins[3 if attrs["decay"] else 2]],
                                              written))
            or (attrs["decay"] and ins[2] != weight)):
        return None
    return Chain(first, second, count, term, update, rounding, after, tuple(casts))


def find(steps: list[Step], plan: Plan, ready: Callable[[Step], bool]) -> dict[Step, Chain]:
    """``{step: its chain}`` for the loop steps of the chains among ``steps`` (one body, not
    its nested bodies) whose loop steps each may run as a compiled loop (``ready``), whose term
    only the ``scaled_add_`` reads and whose gradient, moments, weight and step count are
    distinct arrays."""
    found: dict[Step, Chain] = {}
    last = plan.live.last_read
    for i in range(len(steps)):
        chain = _chain(steps, i)
        if chain is None or not all(ready(x) for x in chain.held if x not in chain.casts):
            continue
        term = chain.term.outs[0]
        reads = [last.get(x) for x in (term, chain.update.ins[1])]
        if any(last.get(c.outs[0]) != plan.positions[chain.term] for c in chain.casts):
            continue
        arrays = [chain.second.ins[1], chain.first.ins[0], chain.second.ins[0],
                  chain.update.ins[0], chain.count.outs[0]]
        rounded = chain.rounding and chain.rounding.outs[0]
        if (max(r for r in reads if r is not None) != plan.positions[chain.update]
                or plan.root[term] in plan.escaping
                or (rounded and (last.get(rounded) != plan.positions[chain.first]
                                 or plan.root[rounded] in plan.escaping))
                or len({plan.root[x] for x in arrays}) != len(arrays)):
            continue
        found.update(dict.fromkeys(chain.held, chain))
    return found
