"""Losses capture keeps as one node: ``poptorch.identity_loss``, the explicit loss marker (a
torch custom op that eager torch can run and differentiate), and CTC loss, whose torch kernel
has a data-dependent shape at capture (``F.ctc_loss`` calls ``ctc_loss_op`` while capturing)."""

from __future__ import annotations

from typing import Any

import torch

REDUCTIONS = ("sum", "mean", "none")


@torch.library.custom_op("xlgraph_poptorch::identity_loss", mutates_args=())
def _identity_loss(x: torch.Tensor, reduction: int) -> torch.Tensor:
    if reduction == 0:
        return x.sum()
    return x.mean() if reduction == 1 else x.clone()


@_identity_loss.register_fake
def _(x: torch.Tensor, reduction: int) -> torch.Tensor:
    return x.new_empty(()) if reduction < 2 else torch.empty_like(x)


def _backward(ctx: object, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
    shape, reduction = ctx.shape, ctx.reduction  # type: ignore[attr-defined]
    if reduction == 2:
        return grad, None
    scale = 1.0 if reduction == 0 else 1.0 / max(torch.Size(shape).numel(), 1)
    return (grad * scale).expand(shape), None


def _save(ctx: object, inputs: tuple[torch.Tensor, int], output: torch.Tensor) -> None:
    ctx.shape, ctx.reduction = inputs[0].shape, inputs[1]  # type: ignore[attr-defined]


_identity_loss.register_autograd(_backward, setup_context=_save)


def identity_loss(x: torch.Tensor, reduction: str) -> torch.Tensor:
    """Mark ``x`` as the loss: ``x.sum()``, ``x.mean()`` or ``x`` for "sum", "mean", "none"."""
    assert reduction in REDUCTIONS, \
        f"identity_loss: reduction must be 'sum', 'mean' or 'none', got {reduction!r}"
    return _identity_loss(x, REDUCTIONS.index(reduction))


@torch.library.custom_op("xlgraph_poptorch::ctc_loss", mutates_args=())
def _ctc_loss(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: torch.Tensor,
              target_lengths: torch.Tensor, blank: int, reduction: int,
              zero_infinity: bool) -> torch.Tensor:
    return torch.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, reduction,
                          zero_infinity)


@_ctc_loss.register_fake
def _(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: torch.Tensor,
      target_lengths: torch.Tensor, blank: int, reduction: int,
      zero_infinity: bool) -> torch.Tensor:
    batch = () if log_probs.dim() == 2 or reduction != 0 else (log_probs.shape[1],)
    return log_probs.new_empty(batch)


_CTC_REDUCTIONS = ("none", "mean", "sum")


def ctc_loss_op(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: Any,
                target_lengths: Any, blank: int = 0, reduction: str = "mean",
                zero_infinity: bool = False) -> torch.Tensor:
    """``F.ctc_loss`` as one captured op (lengths may be tensors or sequences)."""
    def lengths(v: Any) -> torch.Tensor:
        return v if isinstance(v, torch.Tensor) else torch.tensor(v, dtype=torch.int64)

    return _ctc_loss(log_probs, targets, lengths(input_lengths), lengths(target_lengths), blank,
                     _CTC_REDUCTIONS.index(reduction), zero_infinity)
