"""``poptorch.optim``: torch optimisers whose attributes drive an ``xlgraph.optim`` update.

The classes subclass their ``torch.optim`` counterparts (LAMB subclasses ``torch.optim.Optimizer``)
and accept PopTorch's extra arguments; their ``step`` is never used. ``to_xlgraph`` turns any of
them, or a plain ``torch.optim`` SGD/Adam/AdamW/RMSprop, into the matching xlgraph optimiser.
"""

from __future__ import annotations

from typing import Any

import torch

from xlgraph import optim as xl_optim
from xlgraph.errors import XlgraphError

__all__ = ["SGD", "Adam", "AdamW", "RMSprop", "LAMB", "to_xlgraph", "hyperparameters"]

_EXTRAS = ("loss_scaling", "velocity_scaling", "use_combined_accum", "accum_type",
           "velocity_accum_type", "first_order_momentum_accum_type",
           "second_order_momentum_accum_type", "max_grad_norm", "use_tf_variant")


def _extras(opt: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Store PopTorch's extra arguments (they do not change float32 results); return the rest."""
    opt.poptorch_extras = {k: kwargs.pop(k) for k in list(kwargs) if k in _EXTRAS}
    return kwargs


class SGD(torch.optim.SGD):
    """``poptorch.optim.SGD``: torch's SGD (``lr`` required) plus PopTorch's extra arguments."""

    def __init__(self, params: Any, lr: float, *args: Any, **kwargs: Any) -> None:
        super().__init__(params, lr, *args, **_extras(self, kwargs))


class Adam(torch.optim.Adam):
    """``poptorch.optim.Adam``; ``amsgrad=True`` raises ValueError."""

    def __init__(self, params: Any, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("amsgrad"):
            raise ValueError("poptorch.optim.Adam does not support amsgrad")
        super().__init__(params, *args, **_extras(self, kwargs))


class AdamW(torch.optim.AdamW):
    """``poptorch.optim.AdamW`` (weight decay 0.01 by default, as torch)."""

    def __init__(self, params: Any, *args: Any, bias_correction: bool = True,
                 **kwargs: Any) -> None:
        if kwargs.get("amsgrad"):
            raise ValueError("poptorch.optim.AdamW does not support amsgrad")
        if not bias_correction:
            raise ValueError("xlgraph's AdamW always applies bias correction")
        super().__init__(params, *args, **_extras(self, kwargs))


class RMSprop(torch.optim.RMSprop):
    """``poptorch.optim.RMSprop``."""

    def __init__(self, params: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(params, *args, **_extras(self, kwargs))


class LAMB(torch.optim.Optimizer):
    """``poptorch.optim.LAMB`` (PopTorch only): Adam moments, per-tensor trust ratio."""

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, bias_correction: bool = True,
                 loss_scaling: float = 1.0, max_weight_norm: float | None = 65500.0,
                 **kwargs: Any) -> None:
        if not bias_correction:
            raise ValueError("xlgraph's LAMB always applies bias correction")
        _extras(self, kwargs)
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                    "max_weight_norm": max_weight_norm}
        super().__init__(params, defaults)

    def step(self, closure: Any = None) -> None:
        raise XlgraphError("poptorch.optim.LAMB is only used by poptorch.trainingModel")


# -- conversion --------------------------------------------------------------------------------
_KEYS = {
    xl_optim.SGD: ("momentum", "dampening", "weight_decay", "nesterov"),
    xl_optim.Adam: ("betas", "eps", "weight_decay"),
    xl_optim.AdamW: ("betas", "eps", "weight_decay"),
    xl_optim.RMSprop: ("alpha", "eps", "weight_decay", "momentum", "centered"),
    xl_optim.LAMB: ("betas", "eps", "weight_decay", "max_weight_norm"),
}


def _kind(optimizer: torch.optim.Optimizer) -> type[xl_optim.Optimizer]:
    # most derived first: AdamW is not an Adam in torch, LAMB is ours
    for torch_type, kind in ((LAMB, xl_optim.LAMB), (torch.optim.AdamW, xl_optim.AdamW),
                             (torch.optim.Adam, xl_optim.Adam), (torch.optim.SGD, xl_optim.SGD),
                             (torch.optim.RMSprop, xl_optim.RMSprop)):
        if isinstance(optimizer, torch_type):
            return kind
    raise XlgraphError(f"Unsupported optimizer type {type(optimizer).__name__}: use "
                       f"poptorch.optim.SGD/Adam/AdamW/RMSprop/LAMB or torch.optim's "
                       f"SGD/Adam/AdamW/RMSprop")


def hyperparameters(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The learning rate and the settings the xlgraph optimiser is built from.

    Raises:
        XlgraphError: parameter groups that differ in anything but their parameters, or
            settings xlgraph does not implement (amsgrad, maximize).
    """
    kind = _kind(optimizer)
    groups = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
    keys = ("lr",) + _KEYS[kind]
    first = {k: groups[0][k] for k in keys}
    for g in groups[1:]:
        if any(g[k] != first[k] for k in keys):
            raise XlgraphError(f"{type(optimizer).__name__}: parameter groups with different "
                               f"settings are not supported ({groups})")
    if groups[0].get("amsgrad") or groups[0].get("maximize"):
        raise XlgraphError(f"{type(optimizer).__name__}: amsgrad and maximize are not supported")
    return first


def to_xlgraph(optimizer: torch.optim.Optimizer, name: str = "optimizer") -> xl_optim.Optimizer:
    """The xlgraph optimiser with ``optimizer``'s type and settings (state variables ``name.*``)."""
    kind = _kind(optimizer)
    settings = hyperparameters(optimizer)
    return kind(name=name, **{k: float(v) if isinstance(v, int) and not isinstance(v, bool)
                              else v for k, v in settings.items()})


def parameter_ids(optimizer: torch.optim.Optimizer) -> set[int]:
    """``id`` of every tensor the optimiser updates."""
    return {id(p) for g in optimizer.param_groups for p in g["params"]}
