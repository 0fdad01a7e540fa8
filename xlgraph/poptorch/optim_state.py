"""The state of a plain ``torch.optim`` optimiser given to ``trainingModel``, in torch's format.

``poptorch.optim`` optimisers carry the device's optimiser state in their state dict under
``ipu_state``. A ``torch.optim`` SGD, Adam, AdamW or RMSprop keeps torch's own format instead:
before its ``state_dict()`` the device's momentum buffers, moments and step count are copied into
``optimizer.state`` (so the dict also resumes training in eager torch), and after
``load_state_dict()`` (or at compilation, for state loaded or built before) the entries of
``optimizer.state`` are written to the device. As in torch, the state is empty before the first
step. The training wrapper calls these functions; torch's optimizer hooks call the wrapper.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from xlgraph import optim as xl_optim
from xlgraph.poptorch.util import torch_to_numpy

__all__ = ["to_torch", "to_device", "install_hooks"]

# torch keeps a "step" in the state of these (AdamW and LAMB subclass Adam); not in SGD's
_TORCH_STEP = (xl_optim.Adam, xl_optim.RMSprop)


def _entries(update: Any, optimizer: torch.optim.Optimizer, keys: dict[int, str],
             ) -> Iterator[tuple[torch.Tensor, str, xl_optim.Optimizer]]:
    """``(parameter, variable key, xlgraph optimiser of its group)`` of each trained one."""
    for (opt, trained), group in zip(update.groups, optimizer.param_groups):
        for p in group["params"]:
            key = keys.get(id(p))
            if key in trained:
                yield p, key, opt


def to_torch(update: Any, optimizer: torch.optim.Optimizer, keys: dict[int, str],
             device: dict[str, np.ndarray], steps: int) -> None:
    """Write the device's state (``{variable name: array}``) into ``optimizer.state``.

    Args:
        update: the ``PopTorchUpdate`` the state variables belong to.
        keys: ``{id(parameter): variable key}``.
        steps: optimiser steps taken so far (torch's ``step`` where the device has none).
    """
    if steps == 0:
        return  # torch's state is empty before the first step
    for p, key, opt in _entries(update, optimizer, keys):
        names = {slot: opt.slot_name(slot, key) for slot in opt.slots}
        if not all(n in device for n in names.values()):
            continue
        entry = {slot: torch.from_numpy(np.array(device[n])).to(p.dtype)
                 for slot, n in names.items()}
        if isinstance(opt, _TORCH_STEP):
            step = device.get(f"{opt.name}.step", steps)
            entry["step"] = torch.tensor(float(np.asarray(step)), dtype=torch.float32)
        optimizer.state[p] = entry


def to_device(update: Any, optimizer: torch.optim.Optimizer, keys: dict[int, str],
              variables: dict[str, Any]) -> tuple[dict[str, np.ndarray], int]:
    """The values of the state variables (``{name: Variable}``) that ``optimizer.state``
    holds, and the steps it has taken: its ``step``, else 1 when it has any state (SGD keeps
    no count; its first step is special only when the state is empty). Parameters without
    state get zeros, as a fresh optimiser has."""
    values: dict[str, np.ndarray] = {}
    steps = 0
    for p, key, opt in _entries(update, optimizer, keys):
        entry = optimizer.state.get(p) or {}
        if entry:
            step = entry.get("step")
            steps = max(steps, 1 if step is None else int(float(step)))
        for slot in opt.slots:
            name = opt.slot_name(slot, key)
            value = entry.get(slot)
            if name not in variables:
                continue
            var = variables[name]
            if value is None:
                values[name] = np.zeros(var.shape, var.dtype.as_numpy())
            else:
                array = torch_to_numpy(value, f"optimizer state {slot!r} of {key!r}")
                values[name] = array.astype(var.dtype.as_numpy(), copy=False)
    for opt, _ in update.groups:
        if f"{opt.name}.step" in variables:
            values[f"{opt.name}.step"] = np.float32(steps)
    return values, steps


def install_hooks(optimizer: torch.optim.Optimizer, before_save: Callable[[], None],
                  after_load: Callable[[], None]) -> None:
    """Make ``optimizer.state_dict()`` call ``before_save`` first and ``load_state_dict``
    call ``after_load`` after (bound methods, held weakly: the optimiser does not keep the
    wrapper alive). Hooks installed before are replaced."""
    for handle in getattr(optimizer, "_xlgraph_state_hooks", ()):
        handle.remove()
    save, load = weakref.WeakMethod(before_save), weakref.WeakMethod(after_load)

    def call(method: weakref.WeakMethod) -> Callable[[Any], None]:
        def hook(_: Any) -> None:
            bound = method()
            if bound is not None:
                bound()
        return hook

    optimizer._xlgraph_state_hooks = (  # type: ignore[attr-defined]
        optimizer.register_state_dict_pre_hook(call(save)),
        optimizer.register_load_state_dict_post_hook(call(load)))
