"""``cross_entropy`` and ``cross_entropy_with_grad``: softmax cross-entropy on logits."""

from __future__ import annotations

from typing import Any

import xlgraph as popxl
from xlgraph import ops

__all__ = ["cross_entropy", "cross_entropy_with_grad"]


def cross_entropy(x: popxl.Tensor, labels: popxl.Tensor, ignore_index: int | None = None,
                  reduction: str = "mean") -> popxl.Tensor:
    """Cross-entropy of logits ``x`` (classes on the last axis) against integer ``labels``
    shaped ``x.shape[:-1]`` (PopART's ``NllOp`` insists on it), computed in float32 as
    ``nll_loss(log_softmax(x))``; differentiable by autodiff."""
    if x.dtype != popxl.float32:
        x = ops.cast(x, popxl.float32)
    log_probs = x - ops.logsumexp(x, axis=-1, keepdims=True)
    return ops.nll_loss(log_probs, labels, ignore_index, reduction, log_prob=True)


def cross_entropy_with_grad(x: popxl.Tensor, labels: popxl.Tensor, loss_scaling: Any = 1,
                            ignore_index: int | None = None, reduction: str = "mean",
                            ) -> tuple[popxl.Tensor, popxl.Tensor]:
    """The cross-entropy loss of logits ``x`` and its gradient with respect to ``x``, as
    popxl-addons computes them: ``softmax(x)`` in ``x``'s dtype, then
    ``nll_loss_with_softmax_grad``.

    Args:
        x: logits, classes on the last axis.
        labels: integer class indices, any shape of ``prod(x.shape[:-1])`` items (a masked-LM
            head's ``(batch, masked)`` labels for ``(batch * masked, vocab)`` logits).
        loss_scaling: a number or a scalar tensor; multiplies the gradient (the loss is
            returned unscaled).
        ignore_index: a label whose items add nothing to loss or gradient.
        reduction: ``"mean"``, ``"sum"`` or ``"none"`` (the loss then has labels' shape).

    Returns:
        ``(loss, dx)``: the loss in ``x``'s dtype; ``dx`` has ``x``'s shape and dtype.
    """
    probs = ops.softmax(x, axis=-1)
    scaled = isinstance(loss_scaling, popxl.Tensor)
    loss, dx = ops.nll_loss_with_softmax_grad(probs, labels, 1 if scaled else loss_scaling,
                                              ignore_index, reduction)
    if scaled:
        scale = loss_scaling if loss_scaling.dtype == dx.dtype else ops.cast(loss_scaling,
                                                                            dx.dtype)
        dx = dx * scale
    return loss, dx
