"""What ``setOptimizer`` may change after compilation, decided as PopTorch decides it.

Every attribute of a compiled optimiser is constant or variable. ``lr`` is always variable. In a
``poptorch.optim`` optimiser the constructor arguments given explicitly are variable and the rest
constant, unless ``optimizer.variable_attrs.markAsConstant``/``markAsVariable`` said otherwise
before compilation. In a plain ``torch.optim`` optimiser the attributes left at torch's default
are constant. A ``setOptimizer`` that changes a constant (in any param group) raises
``poptorch.Error`` and changes nothing; a variable may take any new value, per param group.
Which parameters each group holds is fixed at compilation too: an optimiser over other
parameters (a subset to freeze layers, or another model's) is refused, since the device would
otherwise go on training the parameters it was compiled with.

``Settings`` is what the device runs with: per-group hyperparameters, PopTorch's optimiser-wide
extras (``loss_scaling``, ``velocity_scaling``, ``max_grad_norm``...), which attributes were
constant when the model was compiled, and which parameters each group trains.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch

from xlgraph.poptorch import optim as pt_optim
from xlgraph.poptorch.enums import MeanReductionStrategy
from xlgraph.poptorch.support import Error

__all__ = ["Settings", "settings_of", "changed_attributes", "needs_running_mean",
           "use_running_mean", "check_running_mean"]

# the torch classes whose constructor defaults decide what a plain torch.optim leaves constant
_TORCH_BASES = (torch.optim.AdamW, torch.optim.Adam, torch.optim.SGD, torch.optim.RMSprop)


@dataclass(frozen=True)
class Settings:
    """The optimiser settings a compiled model runs with."""

    kind: type
    groups: tuple[dict[str, Any], ...]
    extras: dict[str, Any]
    constants: frozenset[str]
    members: tuple[tuple[int, ...], ...] = ()  # the ids of each group's parameters


def _torch_defaults(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    base = next(b for b in _TORCH_BASES if isinstance(optimizer, b))
    return {name: p.default for name, p in inspect.signature(base.__init__).parameters.items()
            if p.default is not inspect.Parameter.empty}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return float(a) == float(b)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _constants(optimizer: torch.optim.Optimizer, names: list[str]) -> frozenset[str]:
    if isinstance(optimizer, pt_optim.Optimizer):
        attrs = optimizer.variable_attrs
        return frozenset(n for n in names if n != "lr" and (
            n not in attrs._allowed_attributes or attrs.isConstant(n)))
    defaults = _torch_defaults(optimizer)
    return frozenset(n for n in names if n != "lr" and n in defaults
                     and _same(optimizer.defaults.get(n, defaults[n]), defaults[n]))


def settings_of(optimizer: torch.optim.Optimizer,
                constants: frozenset[str] | None = None) -> Settings:
    """``optimizer``'s settings, with its own constants (at compilation) or ``constants``
    (those fixed when the model was compiled)."""
    groups = tuple(pt_optim.hyperparameters(optimizer))  # also checks every value
    extras = dict(getattr(optimizer, "poptorch_extras", {}))
    extras.setdefault("loss_scaling", 1.0)
    if constants is None:
        names = sorted({k for g in groups for k in g} | set(extras) | set(pt_optim._EXTRAS))
        constants = _constants(optimizer, names)
    members = tuple(tuple(id(p) for p in g["params"]) for g in optimizer.param_groups)
    return Settings(pt_optim.optimizer_kind(optimizer), groups, extras, constants, members)


def _fix(attr: str, optimizer: torch.optim.Optimizer) -> str:
    if isinstance(optimizer, pt_optim.Optimizer):
        return (f"call optimizer.variable_attrs.markAsVariable({attr!r}) (or pass {attr} to the "
                f"constructor) before the model is compiled")
    return f"give {attr} a value other than torch's default before the model is compiled"


def changed_attributes(old: Settings, optimizer: torch.optim.Optimizer,
                       ) -> tuple[Settings, set[str]]:
    """The settings of ``optimizer`` (with ``old``'s constants) and the attributes whose value
    differs from ``old``'s in any param group.

    Raises:
        Error: another optimiser type, another number of param groups, a group holding other
            parameters, or a changed constant.
    """
    new = settings_of(optimizer, old.constants)
    if new.kind is not old.kind:
        raise Error(f"setOptimizer: the model was compiled with a {old.kind.__name__} "
                    f"optimizer; it cannot change to {type(optimizer).__name__}")
    if len(new.groups) != len(old.groups):
        raise Error(f"setOptimizer: the model was compiled with {len(old.groups)} param "
                    f"group(s); the new optimizer has {len(new.groups)}")
    for index, (before, after) in enumerate(zip(old.members, new.members)):
        if before != after:
            raise Error(
                f"setOptimizer: param group {index} of the new optimizer holds other parameters "
                f"than the model was compiled with ({len(after)} against {len(before)}); which "
                f"parameters are trained is fixed at compilation: to freeze a layer, set its "
                f"parameters' requires_grad=False before the model is compiled")
    changed: set[str] = set()
    for index, (before, after) in enumerate(zip(old.groups, new.groups)):
        for attr in after:
            if not _same(before.get(attr), after[attr]):
                if attr in old.constants:
                    raise Error(
                        f"setOptimizer: {attr} of param group {index} is constant (fixed "
                        f"when the model was compiled): it cannot change from "
                        f"{before.get(attr)!r} to {after[attr]!r}; {_fix(attr, optimizer)}")
                changed.add(attr)
    for attr in sorted(set(old.extras) | set(new.extras)):
        if not _same(old.extras.get(attr), new.extras.get(attr)):
            if attr in old.constants:
                raise Error(
                    f"setOptimizer: {attr} is constant (fixed when the model was compiled): it "
                    f"cannot change from {old.extras.get(attr)!r} to {new.extras.get(attr)!r}; "
                    f"{_fix(attr, optimizer)}")
            changed.add(attr)
    return new, changed


def needs_running_mean(optimizer: torch.optim.Optimizer) -> bool:
    """Whether PopTorch compiles ``optimizer`` with a running mean: a float16 ``accum_type``
    without combined accumulators."""
    extras = getattr(optimizer, "poptorch_extras", {})
    return extras.get("accum_type") == torch.float16 and not extras.get("use_combined_accum")


def use_running_mean(options: Any, optimizer: torch.optim.Optimizer) -> None:
    """Set ``Training.meanAccumulationAndReplicationReductionStrategy`` to ``Running`` when the
    optimiser needs it, over the user's choice and frozen options, as PopTorch does."""
    if needs_running_mean(optimizer):
        options.Training._values["mean_accumulation_and_replication_reduction_strategy"] = \
            MeanReductionStrategy.Running


def check_running_mean(options: Any, optimizer: torch.optim.Optimizer) -> None:
    """Refuse, after compilation, an optimiser that would need the ``Running`` strategy the
    model was not compiled with (``ValueError``, PopTorch's words)."""
    strategy = options.Training.meanAccumulationAndReplicationReductionStrategy
    if needs_running_mean(optimizer) and strategy != MeanReductionStrategy.Running:
        raise ValueError(
            "Invalid optimizer: the new optimizer would require changing "
            "options.Training.meanAccumulationAndReplicationReductionStrategy to "
            "poptorch.MeanReductionStrategy.Running but the executable is already compiled.")
