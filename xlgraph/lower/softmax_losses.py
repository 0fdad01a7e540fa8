"""Softmax losses: a ``softmax`` and the ``nll_loss_with_softmax_grad`` that is its one
reader, found to run as one loop (``ops.softmax_loops.softmax_nll``: a classifier's
loss and gradient from its logits, the probabilities never written).

``find`` returns the pairs of a body: consecutive steps ``p = softmax(x)`` and
``nll_loss_with_softmax_grad(p, labels)``, both run through their ``kernel_out``s, where the
loss is the last read of ``p``, ``p`` does not leave the step, the loss value is not written
to ``x``'s buffer and the gradient goes there only as ``x`` itself (the loop writes each row
after reading it). Under wide storage (``wide_half.py``: float16 logits held in float32) the
pair comes with its roundings: ``softmax``, the rounding of ``p``, the loss, then the roundings
of the loss and of the gradient, each intermediate read by the next step alone; the loop
(``softmax_loops.softmax_nll_half``) rounds as those steps do. The generated step
(``codegen_chains.py``) runs the pair at its last step; the backend decides at compile time
whether the loop applies (float32 logits, no ``ignore_index``, the mean or the sum), else the
steps run as they would alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xlgraph.lower.program import Step
from xlgraph.lower.storage import Plan
from xlgraph.ops.half_round import ROUND_HALF

__all__ = ["SoftmaxLoss", "find"]


@dataclass(eq=False)
class SoftmaxLoss:
    """``probs = softmax(x)`` and ``loss, grad = nll_loss_with_softmax_grad(probs, ...)``;
    ``rounds``: under wide storage, the roundings of the probabilities, the loss and the
    gradient (then the loss and the gradient are their results)."""

    softmax: Step
    loss: Step
    rounds: tuple[Step, ...] = ()

    @property
    def steps(self) -> list[Step]:
        """The steps, in the body's order."""
        if not self.rounds:
            return [self.softmax, self.loss]
        return [self.softmax, self.rounds[0], self.loss, *self.rounds[1:]]

    @property
    def writers(self) -> list[Step]:
        """The steps whose results the loop writes: the loss's, or the last two roundings."""
        return list(self.rounds[1:]) if self.rounds else [self.loss]

    @property
    def results(self) -> list[int]:
        """The slots of the loss and the gradient the loop writes."""
        return [o for s in self.writers for o in s.outs]


def find(steps: list[Step], plan: Plan, ready: Callable[[Step], bool]) -> dict[Step, SoftmaxLoss]:
    """``{step: its pair}`` for the pairs among ``steps`` (one body) whose steps may both run
    as compiled loops (``ready``)."""
    found: dict[Step, SoftmaxLoss] = {}
    for at, softmax in enumerate(steps):
        if not (softmax.kind == "kernel" and softmax.defn.name == "softmax"):
            continue
        shape = _plain(steps[at:at + 2]) or _rounded(steps[at:at + 5])
        if shape is None:
            continue
        pair, inner = shape
        if not (ready(pair.softmax) and ready(pair.loss)) or any(
                plan.live.last_read.get(x) != plan.positions[reader]
                or plan.root[x] in plan.escaping for x, reader in inner):
            continue
        logits = plan.buffer_of.get(plan.root[softmax.ins[0]])
        value, grad = (plan.buffer_of.get(plan.root[o]) for o in pair.results)
        if value == logits or (grad == logits and plan.root[softmax.ins[0]] != softmax.ins[0]):
            continue
        found.update(dict.fromkeys(pair.steps, pair))
    return found


def _kernel(s: Step, name: str) -> bool:
    return s.kind == "kernel" and s.defn.name == name


def _plain(chain: list[Step]) -> tuple[SoftmaxLoss, list[tuple[int, Step]]] | None:
    """``softmax``, loss: the pair and its intermediate with its one reader."""
    if len(chain) < 2 or not _kernel(chain[1], "nll_loss_with_softmax_grad"):
        return None
    softmax, loss = chain
    if loss.ins[0] != softmax.outs[0]:
        return None
    return SoftmaxLoss(softmax, loss), [(softmax.outs[0], loss)]


def _rounded(chain: list[Step]) -> tuple[SoftmaxLoss, list[tuple[int, Step]]] | None:
    """``softmax``, rounding, loss, rounding, rounding (wide storage): the pair and its
    intermediates, each with its one reader."""
    if len(chain) < 5:
        return None
    softmax, probs, loss, value, grad = chain
    if not (all(s.kind == "kernel" and s.defn is ROUND_HALF for s in (probs, value, grad))
            and _kernel(loss, "nll_loss_with_softmax_grad") and len(loss.outs) == 2):
        return None
    inner = [(softmax.outs[0], probs), (probs.outs[0], loss), (loss.outs[0], value),
             (loss.outs[1], grad)]
    if any(reader.ins[0] != x for x, reader in inner):
        return None
    return SoftmaxLoss(softmax, loss, (probs, value, grad)), inner
