"""``poptorch.identity_loss``, the explicit loss marker: a torch custom op, so that capture
keeps it as one node (``xlgraph_poptorch.identity_loss.default``) and eager torch can run and
differentiate it."""

from __future__ import annotations

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
