"""``cross_entropy`` and ``cross_entropy_with_grad``: softmax cross-entropy on logits."""

from __future__ import annotations

import xlgraph as popxl
from xlgraph import ops

__all__ = ["cross_entropy", "cross_entropy_with_grad"]


def _flat(x: popxl.Tensor, labels: popxl.Tensor) -> tuple[popxl.Tensor, popxl.Tensor]:
    if x.rank != labels.rank + 1 or x.shape[:-1] != labels.shape:
        raise ValueError(f"cross_entropy: logits {x.spec} need labels of shape {x.shape[:-1]}, "
                         f"got labels {labels.spec}")
    x = x.reshape((-1, x.shape[-1])) if x.rank != 2 else x
    labels = labels.reshape((-1,)) if labels.rank != 1 else labels
    if x.dtype != popxl.float32:
        x = ops.cast(x, popxl.float32)
    return x, labels


def cross_entropy(x: popxl.Tensor, labels: popxl.Tensor, ignore_index: int | None = None,
                  reduction: str = "mean") -> popxl.Tensor:
    """Cross-entropy of logits ``x`` (classes on the last axis) against integer ``labels``,
    computed in float32 as ``nll_loss(log_softmax(x))``; differentiable by autodiff."""
    flat, flat_labels = _flat(x, labels)
    log_probs = flat - ops.logsumexp(flat, axis=-1, keepdims=True)
    loss = ops.nll_loss(log_probs, flat_labels, ignore_index, reduction, log_prob=True)
    if reduction == "none":
        loss = loss.reshape(labels.shape)
    return loss


def cross_entropy_with_grad(x: popxl.Tensor, labels: popxl.Tensor, loss_scaling: float = 1,
                            ignore_index: int | None = None, reduction: str = "mean",
                            ) -> tuple[popxl.Tensor, popxl.Tensor]:
    """The cross-entropy loss of logits ``x`` and its gradient with respect to ``x``.

    Args:
        x: logits, classes on the last axis.
        labels: integer class indices, shaped ``x.shape[:-1]``.
        loss_scaling: multiplies the gradient (the loss is returned unscaled).
        ignore_index: a label whose items add nothing to loss or gradient.
        reduction: ``"mean"`` or ``"sum"``.

    Returns:
        ``(loss, dx)``; ``dx`` has ``x``'s shape and dtype.
    """
    flat, flat_labels = _flat(x, labels)
    probs = ops.softmax(flat, axis=-1)
    loss, dx = ops.nll_loss_with_softmax_grad(probs, flat_labels, loss_scaling, ignore_index,
                                              reduction)
    if dx.shape != x.shape:
        dx = dx.reshape(x.shape)
    if dx.dtype != x.dtype:
        dx = ops.cast(dx, x.dtype)
    return loss, dx
