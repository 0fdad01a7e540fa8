"""``poptorch.optim``: torch optimisers whose attributes drive an ``xlgraph.optim`` update.

The classes subclass their ``torch.optim`` counterparts (LAMB subclasses ``torch.optim.Optimizer``)
and accept PopTorch's extra arguments; ``step`` on the CPU is torch's (LAMB's is PopTorch's own).
``to_xlgraph`` turns any of them, or a plain ``torch.optim`` SGD/Adam/AdamW/RMSprop, into the
matching xlgraph optimiser.

One idea over about 400 lines: the five optimiser classes share one attribute record
(``VariableAttributes``) and one conversion, and splitting them would part each class from the
checks its attributes go through.
"""

from __future__ import annotations

import functools
import numbers
from typing import Any

import numpy as np
import torch

from xlgraph import dtypes, ops
from xlgraph import optim as xl_optim
from xlgraph.errors import ArgumentError, XlgraphError
from xlgraph.ops.var_updates import copy_var_update_
from xlgraph.tensor import Tensor, Variable, constant

__all__ = ["SGD", "Adam", "AdamW", "RMSprop", "LAMB", "Optimizer", "VariableAttributes",
           "to_xlgraph", "hyperparameters", "PopTorchUpdate"]

_EXTRAS = ("loss_scaling", "velocity_scaling", "use_combined_accum", "accum_type",
           "velocity_accum_type", "first_order_momentum_accum_type",
           "second_order_momentum_accum_type", "max_grad_norm", "use_tf_variant",
           "bias_correction")


def _extras(opt: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Store PopTorch's extra arguments (set ones only); return torch's."""
    opt.poptorch_extras = {k: v for k in list(kwargs) if k in _EXTRAS
                           for v in [kwargs.pop(k)] if v is not None}
    return {k: v for k, v in kwargs.items() if v is not None}


class VariableAttributes:
    """Which optimiser attributes may change after compilation (``markAsConstant``/
    ``markAsVariable``); ``lr`` is always variable. ``_variable_attributes`` and
    ``_allowed_attributes`` hold the names, as PopTorch's do."""

    def __init__(self, variable_attributes: list[str], allowed_attributes: list[str]) -> None:
        self._allowed_attributes = list(dict.fromkeys(["lr", *allowed_attributes]))
        self._variable_attributes = list(dict.fromkeys(["lr", *variable_attributes]))

    def _check(self, attr: str) -> None:
        if attr not in self._allowed_attributes:
            raise ValueError(f"Unknown attribute {attr!r}: this optimizer's attributes are "
                             f"{sorted(self._allowed_attributes)}")

    def isConstant(self, attr: str) -> bool:  # noqa: N802
        """Whether ``attr`` is fixed at compilation."""
        self._check(attr)
        return attr not in self._variable_attributes

    def markAsConstant(self, attr: str) -> None:  # noqa: N802
        """Fix ``attr`` at compilation (changing it later is an error)."""
        self._check(attr)
        if attr == "lr":
            raise ValueError("lr is always variable")
        if attr in self._variable_attributes:
            self._variable_attributes.remove(attr)

    def markAsVariable(self, attr: str) -> None:  # noqa: N802
        """Let ``attr`` change after compilation (through ``setOptimizer``)."""
        self._check(attr)
        if attr not in self._variable_attributes:
            self._variable_attributes.append(attr)


class Optimizer:
    """The mixin PopTorch's optimisers share: extra arguments and device-state round trips."""

    def __init__(self) -> None:
        """A base class: construct ``SGD``, ``Adam``, ``AdamW``, ``RMSprop`` or ``LAMB``."""

    def _poptorch_init(self, given: dict[str, Any]) -> None:
        allowed = [k for k in self.defaults if k != "params"] + list(_EXTRAS)
        self.variable_attrs = VariableAttributes(
            [k for k, v in given.items() if v is not None], allowed)
        self._device_state: dict[str, Any] = {}
        self._loaded: dict[str, Any] | None = None  # ipu_state/ipu_param loaded, not yet run
        self._loaded_at = 0  # the wrapper's step count when they were loaded
        self._device: Any = None  # a weakref to the training wrapper holding the state

    def __getstate__(self) -> dict[str, Any]:
        """torch's state plus PopTorch's attributes (``copy.copy`` and pickling keep them;
        the link to a training wrapper is not kept)."""
        state = torch.optim.Optimizer.__getstate__(self)  # type: ignore[arg-type]
        for name in ("variable_attrs", "poptorch_extras", "_device_state", "_loaded",
                     "_loaded_at"):
            if name in self.__dict__:
                state[name] = self.__dict__[name]
        state["_device"] = None
        return state

    @property
    def loss_scaling(self) -> float:
        """The loss is multiplied by this and the gradients divided by it (1 when not given);
        set it, then call ``setOptimizer``, to change it after compilation."""
        return float(self.poptorch_extras.get("loss_scaling", 1.0))

    @loss_scaling.setter
    def loss_scaling(self, value: float) -> None:
        self.poptorch_extras["loss_scaling"] = value

    def _wrapper(self) -> Any:
        return None if self._device is None else self._device()

    def state_dict(self) -> dict[str, Any]:
        """PopTorch's state dict: ``ipu_state`` (the device's momentum buffers, moments and
        step counts by variable name) and ``ipu_param`` (its hyper-parameter tensors), both
        None before compilation, then torch's entries. Until the next run after
        ``load_state_dict`` they are what was loaded."""
        wrapper = self._wrapper()
        if self._loaded is not None and (wrapper is None or
                                         wrapper._optimizer_steps == self._loaded_at):
            ipu = dict(self._loaded)
        elif wrapper is not None and wrapper.isCompiled():
            self._loaded = None
            self._device_state = wrapper.read_optimizer_state() or self._device_state
            ipu = {"ipu_state": dict(self._device_state), "ipu_param": wrapper.ipu_params()}
        else:
            ipu = {"ipu_state": dict(self._device_state) or None, "ipu_param": None}
        return {**ipu, **torch.optim.Optimizer.state_dict(self)}  # type: ignore[arg-type]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load torch's state dict, then PopTorch's device state (``ipu_state``), which
        reaches the device now if a compiled wrapper uses this optimiser, else at its
        compilation; entries it lacks keep their device values.

        Raises:
            RuntimeError: ``state`` is empty, or is not a PopTorch optimiser's (no
                ``ipu_state`` and ``ipu_param``), as PopTorch.
        """
        if not state:
            raise RuntimeError("Cannot load optimizer state dictionary because it is empty.")
        state = dict(state)
        ipu = {k: state.pop(k) for k in ("ipu_state", "ipu_param") if k in state}
        torch.optim.Optimizer.load_state_dict(self, state)  # type: ignore[arg-type]
        if len(ipu) != 2:
            raise RuntimeError("Only IPU optimizer states can be loaded onto the IPU.")
        self._device_state = dict(ipu["ipu_state"] or {})
        wrapper = self._wrapper()
        self._loaded, self._loaded_at = ipu, 0 if wrapper is None else wrapper._optimizer_steps
        if wrapper is not None and self._device_state:
            wrapper.write_optimizer_state(self._device_state)

    def get_state_dict(self) -> dict[str, Any]:
        """``state_dict()``."""
        return self.state_dict()

    def set_state_dict(self, state: dict[str, Any]) -> None:
        """``load_state_dict(state)``."""
        self.load_state_dict(state)

    def has_state(self) -> bool:
        """Whether device state (momentum, moments) has been read back."""
        return bool(self._device_state)


def _given(local: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in local.items() if k not in ("self", "params", "__class__")}


class SGD(Optimizer, torch.optim.SGD):
    """``poptorch.optim.SGD``: torch's SGD (``lr`` required) plus PopTorch's extra arguments.

    ``loss_scaling`` multiplies the loss and divides the gradients; ``max_grad_norm`` clips the
    global gradient norm; float16 ``accum_type``/``velocity_accum_type`` round the accumulated
    gradient / the momentum buffer to float16. ``velocity_scaling`` and
    ``use_combined_accum`` are recorded (the velocity is kept unscaled).
    """

    def __init__(self, params: Any, lr: float, momentum: float | None = None,
                 dampening: float | None = None, weight_decay: float | None = None,
                 nesterov: bool | None = None, maximize: bool | None = None,
                 foreach: bool | None = None, differentiable: bool | None = None,
                 loss_scaling: float | None = None, velocity_scaling: float | None = None,
                 use_combined_accum: bool | None = None, accum_type: Any = None,
                 velocity_accum_type: Any = None, max_grad_norm: float | None = None) -> None:
        given = _given(locals())
        torch.optim.SGD.__init__(self, params, **_extras(self, dict(given)))
        self._poptorch_init(given)


class Adam(Optimizer, torch.optim.Adam):
    """``poptorch.optim.Adam``; ``amsgrad=True`` raises ValueError."""

    def __init__(self, params: Any, lr: float | None = None, betas: Any = None,
                 eps: float | None = None, weight_decay: float | None = None,
                 amsgrad: bool | None = None, foreach: bool | None = None,
                 maximize: bool | None = None, capturable: bool | None = None,
                 differentiable: bool | None = None, fused: bool | None = None,
                 loss_scaling: float | None = None, accum_type: Any = None,
                 first_order_momentum_accum_type: Any = None,
                 second_order_momentum_accum_type: Any = None,
                 max_grad_norm: float | None = None) -> None:
        if amsgrad:
            raise ValueError("poptorch.optim.Adam does not support amsgrad")
        given = _given(locals())
        torch.optim.Adam.__init__(self, params, **_extras(self, dict(given)))
        self._poptorch_init(given)


class AdamW(Optimizer, torch.optim.AdamW):
    """``poptorch.optim.AdamW`` (weight decay 0.01 by default, as torch)."""

    def __init__(self, params: Any, lr: float | None = None, betas: Any = None,
                 eps: float | None = None, weight_decay: float | None = None,
                 amsgrad: bool | None = None, maximize: bool | None = None,
                 foreach: bool | None = None, capturable: bool | None = None,
                 differentiable: bool | None = None, fused: bool | None = None,
                 loss_scaling: float | None = None, bias_correction: bool | None = None,
                 accum_type: Any = None, first_order_momentum_accum_type: Any = None,
                 second_order_momentum_accum_type: Any = None,
                 max_grad_norm: float | None = None) -> None:
        if amsgrad:
            raise ValueError("poptorch.optim.AdamW does not support amsgrad")
        given = _given(locals())
        torch.optim.AdamW.__init__(self, params, **_extras(self, dict(given)))
        self._poptorch_init(given)


class RMSprop(Optimizer, torch.optim.RMSprop):
    """``poptorch.optim.RMSprop``; ``use_tf_variant=True`` trains with TensorFlow's form on the
    device (the average starts at 1, ``eps`` inside the root, ``lr`` folded into the momentum);
    ``step()`` on the CPU is torch's."""

    def __init__(self, params: Any, lr: float | None = None, alpha: float | None = None,
                 eps: float | None = None, weight_decay: float | None = None,
                 momentum: float | None = None, centered: bool | None = None,
                 foreach: bool | None = None, maximize: bool | None = None,
                 differentiable: bool | None = None, loss_scaling: float | None = None,
                 accum_type: Any = None, first_order_momentum_accum_type: Any = None,
                 second_order_momentum_accum_type: Any = None,
                 use_tf_variant: bool | None = None) -> None:
        given = _given(locals())
        torch.optim.RMSprop.__init__(self, params, **_extras(self, dict(given)))
        self._poptorch_init(given)


class LAMB(Optimizer, torch.optim.Optimizer):
    """``poptorch.optim.LAMB`` (PopTorch only): Adam moments, per-tensor trust ratio."""

    def __init__(self, params: Any, lr: float | None = None, betas: Any = None,
                 eps: float | None = None, weight_decay: float | None = None,
                 bias_correction: bool | None = None, loss_scaling: float | None = None,
                 max_weight_norm: float | None = None, accum_type: Any = None,
                 first_order_momentum_accum_type: Any = None,
                 second_order_momentum_accum_type: Any = None) -> None:
        given = _given(locals())
        _extras(self, dict(given))
        defaults = {"lr": 1e-3 if lr is None else lr,
                    "betas": (0.9, 0.999) if betas is None else betas,
                    "eps": 1e-8 if eps is None else eps,
                    "weight_decay": 1e-2 if weight_decay is None else weight_decay,
                    "max_weight_norm": 65500.0 if max_weight_norm is None else max_weight_norm}
        torch.optim.Optimizer.__init__(self, params, defaults)
        self._poptorch_init(given)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        """One LAMB step on the CPU, as the device takes it (so a CPU copy trains the same):
        Adam's moments, ``weight_decay * p`` added to the direction, and the per-tensor trust
        ratio ``min(||p||, max_weight_norm) / ||direction||`` (1 when either norm is 0)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        corrected = self.poptorch_extras.get("bias_correction", True)
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                m = state["exp_avg"].mul_(beta1).add_(p.grad, alpha=1 - beta1)
                v = state["exp_avg_sq"].mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                t = float(state["step"])
                c1, c2 = (1 - beta1**t, 1 - beta2**t) if corrected else (1.0, 1.0)
                update = (m / c1) / (v.sqrt() / c2**0.5 + group["eps"]) \
                    + group["weight_decay"] * p
                r1 = min(float(p.norm()), float(group["max_weight_norm"]))
                r2 = float(update.norm())
                trust = 1.0 if r1 == 0 or r2 == 0 else r1 / r2
                p.sub_(group["lr"] * trust * update)
        return loss


# -- conversion --------------------------------------------------------------------------------
_KEYS = {
    xl_optim.SGD: ("momentum", "dampening", "weight_decay", "nesterov"),
    xl_optim.Adam: ("betas", "eps", "weight_decay"),
    xl_optim.AdamW: ("betas", "eps", "weight_decay"),
    xl_optim.RMSprop: ("alpha", "eps", "weight_decay", "momentum", "centered"),
    xl_optim.LAMB: ("betas", "eps", "weight_decay", "max_weight_norm"),
}
# which optimiser slots each PopTorch accumulator-type argument sets
_SLOT_TYPES = {
    "velocity_accum_type": ("momentum_buffer",),
    "first_order_momentum_accum_type": ("exp_avg", "grad_avg", "momentum_buffer"),
    "second_order_momentum_accum_type": ("exp_avg_sq", "square_avg"),
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


optimizer_kind = _kind  # the xlgraph optimiser class a torch optimiser runs as


def _group_settings(kind: type[xl_optim.Optimizer], group: dict[str, Any]) -> dict[str, Any]:
    return {k: group[k] for k in ("lr",) + _KEYS[kind]}


def _is_number(value: Any) -> bool:
    """A real number (not a bool), or a one-element tensor of one (torch allows a tensor lr)."""
    if isinstance(value, torch.Tensor):
        return value.numel() == 1 and not value.dtype.is_complex and value.dtype != torch.bool
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _check_settings(optimizer: torch.optim.Optimizer, index: int,
                    settings: dict[str, Any]) -> None:
    """Refuse a setting of param group ``index`` that is not a number (``betas`` a pair of
    numbers, ``nesterov``/``centered`` anything torch takes as a flag), naming both."""
    for key, value in settings.items():
        if key in ("nesterov", "centered"):
            continue
        values = value if key == "betas" and isinstance(value, (tuple, list)) else [value]
        if not all(_is_number(v) for v in values) or (key == "betas" and len(values) != 2):
            raise ArgumentError(f"{type(optimizer).__name__}: param group {index}: {key} must "
                                f"be {'a pair of numbers' if key == 'betas' else 'a number'}, "
                                f"got {value!r}")


def hyperparameters(optimizer: torch.optim.Optimizer) -> list[dict[str, Any]]:
    """The settings of each parameter group the xlgraph optimisers are built from.

    Raises:
        XlgraphError: settings xlgraph does not implement (amsgrad, maximize), or an
            accumulator type other than float16/float32.
        ArgumentError: a setting of a group that is not a number (naming the group).
    """
    kind = _kind(optimizer)
    for g in optimizer.param_groups:
        if g.get("amsgrad") or g.get("maximize"):
            raise XlgraphError(f"{type(optimizer).__name__}: amsgrad and maximize are not "
                               f"supported")
    for key, value in _extras_of(optimizer).items():
        if key.endswith("_type") and value not in (None, torch.float16, torch.float32):
            raise XlgraphError(f"{type(optimizer).__name__}: {key} must be torch.float16 or "
                               f"torch.float32, got {value}")
    settings = [_group_settings(kind, g) for g in optimizer.param_groups]
    for index, group in enumerate(settings):
        _check_settings(optimizer, index, group)
    return settings


def _extras_of(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    return dict(getattr(optimizer, "poptorch_extras", {}))


def _float(v: Any) -> Any:
    return float(v) if isinstance(v, int) and not isinstance(v, bool) else v


class PopTorchUpdate:
    """One xlgraph optimiser per parameter group, plus PopTorch's extras around them.

    Gradients are divided by ``loss_scaling`` (the loss was multiplied by it), clipped to a
    global norm of ``max_grad_norm``, rounded to float16 with ``accum_type=torch.float16``, and
    slots with a float16 momentum type are rounded to float16 after each update.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, keys: dict[int, str],
                 name: str = "optimizer", settings: Any = None, extras: Any = None) -> None:
        kind = _kind(optimizer)
        extras = _extras_of(optimizer) if extras is None else dict(extras)
        settings = hyperparameters(optimizer) if settings is None else settings
        # LAMB's alone: PopTorch's AdamW(bias_correction=False) still corrects on the device
        flags = {"bias_correction": bool(extras.get("bias_correction", True))} \
            if kind is xl_optim.LAMB else \
            {"tf_variant": bool(extras.get("use_tf_variant", False))} \
            if kind is xl_optim.RMSprop else {}
        self.groups: list[tuple[xl_optim.Optimizer, set[str]]] = []
        for i, (group, values) in enumerate(zip(optimizer.param_groups, settings)):
            opt = kind(name=name if i == 0 else f"{name}.group{i}",
                       **{k: _float(v) for k, v in values.items()}, **flags)
            self.groups.append((opt, {keys[id(p)] for p in group["params"] if id(p) in keys}))
        self.loss_scaling = float(extras.get("loss_scaling", 1.0))
        self.max_grad_norm = extras.get("max_grad_norm")
        self.half_grads = extras.get("accum_type") == torch.float16
        self.half_slots = {slot for key, slots in _SLOT_TYPES.items()
                           if extras.get(key) == torch.float16 for slot in slots}

    def create_state(self, params: dict[str, Tensor]) -> dict[str, Variable]:
        """Create every group's optimiser state in the current (main) graph."""
        state: dict[str, Variable] = {}
        for opt, keys in self.groups:
            state.update(opt.create_state({k: p for k, p in params.items() if k in keys}))
        return state

    def update(self, params: dict[str, Tensor], grads: dict[str, Tensor],
               state: dict[str, Tensor]) -> None:
        """Unscale, clip and round the gradients, then update each group's parameters."""
        grads = dict(grads)
        if self.loss_scaling != 1.0:
            grads = {k: g * (1.0 / self.loss_scaling) for k, g in grads.items()}
        if self.half_grads:
            grads = {k: _round_half(g) for k, g in grads.items()}
        if self.max_grad_norm is not None and grads:
            total = ops.sqrt(functools.reduce(
                lambda a, b: a + b, [ops.sum(ops.cast(g * g, dtypes.float32))
                                     for g in grads.values()]))
            coef = constant(float(self.max_grad_norm), dtypes.float32) / (total + 1e-6)
            coef = ops.where(ops.greater(coef, 1.0), constant(np.float32(1.0)), coef)
            grads = {k: g * ops.cast(coef, g.dtype) for k, g in grads.items()}
        for opt, keys in self.groups:
            mine = {k: p for k, p in params.items() if k in keys}
            opt.update(mine, {k: grads[k] for k in mine}, state)
            for slot in opt.slots:
                if slot in self.half_slots:
                    for k in mine:
                        buffer = state[opt.slot_name(slot, k)]
                        copy_var_update_(buffer, _round_half(buffer))

    def set_lrs(self, session: Any, lrs: list[float]) -> None:
        """Write each group's learning rate."""
        for (opt, _), lr in zip(self.groups, lrs):
            opt.set_lr(session, lr)


def _round_half(t: Tensor) -> Tensor:
    """``t`` rounded to the nearest float16 value (kept in its own dtype)."""
    if t.dtype == dtypes.float16:
        return t
    return ops.cast(ops.cast(t, dtypes.float16), t.dtype)


def to_xlgraph(optimizer: torch.optim.Optimizer, keys: dict[int, str],
               name: str = "optimizer", settings: Any = None,
               extras: Any = None) -> PopTorchUpdate:
    """The xlgraph update for ``optimizer``: ``keys`` maps ``id(tensor)`` to its variable name;
    state variables are named ``name.*`` (``name.group<i>.*`` for later groups). ``settings``
    (per-group hyperparameters) and ``extras`` (PopTorch's optimiser-wide arguments) replace
    the optimiser's current ones when given."""
    return PopTorchUpdate(optimizer, keys, name, settings, extras)


def parameter_ids(optimizer: torch.optim.Optimizer) -> set[int]:
    """``id`` of every tensor the optimiser updates."""
    return {id(p) for g in optimizer.param_groups for p in g["params"]}
