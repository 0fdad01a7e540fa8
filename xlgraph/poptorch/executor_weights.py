"""The weight traffic of a ``PoplarExecutor``: the optimiser's state between torch and the
device, anchored gradients, and the profile written after compilation.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

import numpy as np

from xlgraph.poptorch import optim as pt_optim
from xlgraph.poptorch import optim_changes, optim_params, optim_state, weights
from xlgraph.poptorch.executor_calls import _apply_output_mode, _to_torch
from xlgraph.poptorch.executor_compile import _Compiled
from xlgraph.poptorch.support import Error


def _anchor_key(long_name: str) -> str:
    """The ``state_dict`` key an anchor names (``Gradient___model.fc.weight`` -> ``fc.weight``)."""
    for prefix in ("Gradient___", "UpdatedVar___"):
        long_name = long_name.removeprefix(prefix)
    return long_name.removeprefix("model.")


class _WeightTraffic:
    """What ``PoplarExecutor``'s weight and optimiser methods share."""

    def _require_compiled(self) -> _Compiled:
        if self._compiled is None:
            raise Error("Model has not been compiled or has been destroyed.")
        return self._compiled

    def _write_profile(self) -> None:
        """With ``enableProfiling(dir)``: the report as ``dir/profile.json``.

        Raises:
            Error: the file cannot be written there, naming ``Options.enableProfiling``.
        """
        if self.options.profile_dir:
            path = os.path.join(self.options.profile_dir, "profile.json")
            try:
                os.makedirs(self.options.profile_dir, exist_ok=True)
                self._compiled.session.report().save(path)
            except OSError as exc:
                where = f": {exc.filename!r}" if exc.filename else ""
                raise Error(f"the profile that Options.enableProfiling("
                            f"{self.options.profile_dir!r}) asks for cannot be written to "
                            f"{path!r}: {exc.strerror or exc}{where}") from None

    def _trained_versions(self) -> tuple[tuple[int, int], ...]:
        """For an inference model, the host weights versions of the training models sharing
        its module (fetching their trained weights first); nothing for a training model."""
        return () if self.training else weights.fetch_trained(self._user_model)

    def _upload_trained(self) -> None:
        """Before an inference call, as PopTorch: upload every weight again only when a
        training model of the same module moved the host weights on since the last upload;
        other host edits wait for ``copyWeightsToDevice()``."""
        versions = self._trained_versions()
        if versions != self._uploaded_versions:
            self._compiled.sync.upload_all()
            self._uploaded_versions = versions

    def _bind_optimizer(self, optimizer: Any) -> None:
        """Let a ``poptorch.optim`` optimiser read and write its device state through us; state
        it loaded before compilation is written now."""
        if isinstance(optimizer, pt_optim.Optimizer):
            optimizer._device = weakref.ref(self)
            if optimizer._device_state:
                self.write_optimizer_state(optimizer._device_state)
        else:  # a torch.optim optimiser: its own ``state`` in torch's format
            optim_state.install_hooks(optimizer, self._torch_state_to_host,
                                      self._torch_state_to_device)
            if optimizer.state:
                self._torch_state_to_device()

    def ipu_params(self) -> dict[str, Any]:
        """The optimiser's hyper-parameters as the device holds them (``ipu_param``): the
        settings compiled or last given to ``setOptimizer``."""
        settings = self._settings or optim_changes.settings_of(self._optimizer)
        return optim_params.ipu_params(settings.groups, self._optimizer, self._state_keys,
                                       settings.extras.get("loss_scaling", 1.0))

    def _optimizer_state_to_host(self) -> None:
        """Keep the device's optimiser state in the optimiser (before the device goes)."""
        if isinstance(self._optimizer, pt_optim.Optimizer):
            self._optimizer._device_state = self.read_optimizer_state()
        else:
            self._torch_state_to_host()

    def _torch_state_to_host(self) -> None:
        """Copy the device's state into the torch optimiser's ``state`` (``state_dict``)."""
        device = {k: v.numpy() for k, v in self.read_optimizer_state().items()}
        if device:
            optim_state.to_torch(self._compiled.optimizer, self._optimizer, self._state_keys,
                                 device, self._optimizer_steps)

    def _torch_state_to_device(self) -> None:
        """Write the torch optimiser's ``state`` to the device (``load_state_dict``)."""
        if self.isAttachedToDevice():
            values, self._optimizer_steps = optim_state.to_device(
                self._compiled.optimizer, self._optimizer, self._state_keys,
                self._optimizer_state)
            self.write_optimizer_state(values)

    # -- anchors, profiling and executables ----------------------------------------------------
    def _anchored_gradients(self) -> list[str]:
        """Parameter keys of the ``Gradient___<key>`` anchors."""
        return [_anchor_key(long) for long, _, _ in self.options.anchored_tensors.values()
                if long.startswith("Gradient___")]

    def _keep_anchored_gradients(self, out: dict[Any, np.ndarray]) -> None:
        """Keep each anchored gradient of this call, selected by the anchor's output mode."""
        for short, (long, mode, period) in self.options.anchored_tensors.items():
            stream = self._grad_streams.get(_anchor_key(long))
            if long.startswith("Gradient___") and stream is not None:
                steps = self.options.device_iterations
                data = out[stream]
                if self._steps > 1:  # one copy per micro-batch: keep each step's last
                    data = data.reshape((steps, -1) + data.shape[1:])[:, -1]
                    data = data[0] if steps == 1 else data
                self._anchors[short] = _to_torch(_apply_output_mode(
                    data, steps, self._replicas,
                    mode if mode is not None else self.options.output_mode, period))
