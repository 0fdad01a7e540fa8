"""``poptorch.identity_loss``, the explicit loss marker (an fx leaf when traced)."""

from __future__ import annotations

import torch
import torch.fx


def identity_loss(x: torch.Tensor, reduction: str) -> torch.Tensor:
    """Mark ``x`` as the loss: ``x.sum()``, ``x.mean()`` or ``x`` for "sum", "mean", "none"."""
    assert reduction in ("sum", "mean", "none"), \
        f"identity_loss: reduction must be 'sum', 'mean' or 'none', got {reduction!r}"
    if isinstance(x, torch.fx.Proxy):
        return x.tracer.create_proxy("call_function", identity_loss, (x,),
                                     {"reduction": reduction})
    return {"sum": torch.sum, "mean": torch.mean}.get(reduction, torch.clone)(x)
