"""Softmax losses: a ``softmax`` and the ``nll_loss_with_softmax_grad`` that is its one
reader, found to run as one loop (``ops.softmax_loops.softmax_nll``: a classifier's
loss and gradient from its logits, the probabilities never written).

``find`` returns the pairs of a body: consecutive steps ``p = softmax(x)`` and
``nll_loss_with_softmax_grad(p, labels)``, both run through their ``kernel_out``s, where the
loss is the last read of ``p``, ``p`` does not leave the step, the loss value is not written
to ``x``'s buffer and the gradient goes there only as ``x`` itself (the loop writes each row
after reading it). The generated step (``codegen_chains.py``) runs the pair
at the loss; the backend decides at compile time whether the loop applies (float32 logits,
no ``ignore_index``, the mean or the sum), else both steps run as they would alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xlgraph.lower.program import Step
from xlgraph.lower.storage import Plan

__all__ = ["SoftmaxLoss", "find"]


@dataclass(eq=False)
class SoftmaxLoss:
    """``probs = softmax(x)`` and ``loss, grad = nll_loss_with_softmax_grad(probs, ...)``."""

    softmax: Step
    loss: Step


def find(steps: list[Step], plan: Plan, ready: Callable[[Step], bool]) -> dict[Step, SoftmaxLoss]:
    """``{step: its pair}`` for the pairs among ``steps`` (one body) whose steps may both run
    as compiled loops (``ready``)."""
    found: dict[Step, SoftmaxLoss] = {}
    for softmax, loss in zip(steps, steps[1:]):
        if not (softmax.kind == loss.kind == "kernel" and softmax.defn.name == "softmax"
                and loss.defn.name == "nll_loss_with_softmax_grad"):
            continue
        probs, x = softmax.outs[0], softmax.ins[0]
        logits = plan.buffer_of.get(plan.root[x])
        value, grad = (plan.buffer_of.get(plan.root[o]) for o in loss.outs)
        if (loss.ins[0] != probs or not ready(softmax)
                or not ready(loss) or plan.live.last_read.get(probs) != plan.positions[loss]
                or plan.root[probs] in plan.escaping or value == logits
                or (grad == logits and plan.root[x] != x)):
            continue
        found.update(dict.fromkeys((softmax, loss), SoftmaxLoss(softmax, loss)))
    return found
