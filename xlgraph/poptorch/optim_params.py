"""The ``ipu_param`` entries of a ``poptorch.optim`` state dict: the optimiser's
hyper-parameters as the device holds them, one tensor per parameter and attribute, keyed by
PopART's ids (``learningRate___specific___fc.weight``) plus the loss scaling
(``lossScaling_FLOAT``)."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["ipu_params"]

_NAMES = {"lr": "learningRate", "weight_decay": "weightDecay", "momentum": "momentum",
          "dampening": "dampening", "eps": "eps", "alpha": "alpha",
          "max_weight_norm": "maxWeightNorm"}


def ipu_params(groups: Any, optimizer: torch.optim.Optimizer, keys: dict[int, str],
               loss_scaling: float) -> dict[str, torch.Tensor]:
    """``{PopART id: value}`` of each group's settings (``groups``, as compiled or last set
    by ``setOptimizer``) for each of its parameters named in ``keys`` (``{id: name}``)."""
    out: dict[str, torch.Tensor] = {}
    for settings, group in zip(groups, optimizer.param_groups):
        values = {_NAMES[k]: v for k, v in settings.items() if k in _NAMES and v is not None}
        betas = settings.get("betas")
        if betas is not None:
            values.update(beta1=betas[0], beta2=betas[1])
        for p in group["params"]:
            key = keys.get(id(p))
            if key is None:
                continue
            for name, value in values.items():
                out[f"{name}___specific___{key}"] = torch.tensor(float(value))
    out["lossScaling_FLOAT"] = torch.tensor(float(loss_scaling))
    return out
