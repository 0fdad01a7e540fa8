"""``PoplarExecutor``: a torch module compiled to an xlgraph Session, called like the module.

The first call (or ``compile``) traces the module on one micro-batch, builds the training step
(``xlgraph.training.build_train_step``) or the inference loop (``build_inference``) with
``deviceIterations`` host transfers per run, and attaches a Session. Each call feeds one run and
returns torch tensors shaped by the output mode.

``PoplarExecutor`` is one class built from three parts, one module each: the compile step
(``executor_compile.py``), the per-call plan (``executor_calls.py``) and the weight traffic
(``executor_weights.py``); this module holds its public methods.
"""

from __future__ import annotations

import copy
import inspect
import warnings
from typing import Any

import numpy as np
import torch

from xlgraph.poptorch import executable_file, optim_changes, weights
from xlgraph.poptorch import optim as pt_optim
from xlgraph.poptorch.enums import OutputMode
from xlgraph.poptorch.executor_calls import (  # noqa: F401 - the old path re-exports them
    BatchDimensionError,
    _apply_output_mode,
    _CallPlan,
    _to_torch,
)
from xlgraph.poptorch.executor_compile import (  # noqa: F401 - the old path re-exports them
    _compile_bar,
    _Compiled,
    _CompileStep,
    _concrete,
    _ipu_model,
    registerPostCompileHook,
    registerPreCompileHook,
)
from xlgraph.poptorch.executor_weights import (  # noqa: F401 - the old path re-exports them
    _anchor_key,
    _WeightTraffic,
)
from xlgraph.poptorch.lowering import torch_to_numpy
from xlgraph.poptorch.option_rules import check_inference_options
from xlgraph.poptorch.options import Options
from xlgraph.poptorch.support import Error

__all__ = ["Error", "PoplarExecutor", "trainingModel", "inferenceModel",
           "registerPostCompileHook", "registerPreCompileHook"]


class PoplarExecutor(_CompileStep, _CallPlan, _WeightTraffic):
    """A wrapped module: call it with ``forward``'s arguments (dim 0 = batch x iterations)."""

    def __init__(self, model: torch.nn.Module, options: Options | None, training: bool,
                 optimizer: torch.optim.Optimizer | None = None) -> None:
        options = options if options is not None else Options()
        if not isinstance(options, Options):
            raise TypeError(f"expected a poptorch.Options, got {type(options).__name__}")
        options.freeze()
        self._options = options.clone()
        if not training:
            check_inference_options(self._options)
        mode = self._options.resolved_output_mode(training)
        self._options.outputMode(mode, self._options.output_return_period
                                 if mode == OutputMode.EveryN else None)
        self._options.freeze()
        self.training = training
        self._user_model = model
        self._traced = copy.copy(model)  # parameters shared; the training flag is frozen here
        self._signature = inspect.signature(model.forward)
        self._optimizer = optimizer
        if training and optimizer is None:
            self._optimizer = pt_optim.SGD(model.parameters(), lr=0.01)
        if training:
            pt_optim.hyperparameters(self._optimizer)  # refuse unsupported optimisers now
        self._compiled: _Compiled | None = None
        self._compile_seconds = 0.0
        self._anchors: dict[str, torch.Tensor] = {}
        self._grad_streams: dict[str, Any] = {}
        self._grad_keys: list[str] = []
        self._optimizer_state: dict[str, Any] = {}
        self._state_keys: dict[int, str] = {}  # id(parameter) -> its optimiser-state key
        self._optimizer_steps = 0  # steps the device took (torch's optimiser state "step")
        self._settings: optim_changes.Settings | None = None  # the optimiser's, as compiled
        self._stale_step = False  # setOptimizer changed more than learning rates
        self._hooked = training
        self._carried_state: dict[str, torch.Tensor] = {}  # kept by destroy() for a recompile
        self._uploaded_versions: tuple[tuple[int, int], ...] = ()  # inference: see _trained_in
        if training:
            weights.hook_module(model, self)

    @property
    def options(self) -> Options:
        """The wrapper's own (frozen) copy of the options, with ``output_mode`` resolved."""
        return self._options

    @property
    def model(self) -> torch.nn.Module:
        """The wrapped torch module."""
        return self._user_model

    def compile(self, *args: Any, **kwargs: Any) -> None:
        """Trace and compile for these arguments, then attach (the first call does it too)."""
        if self._compiled is not None:
            warnings.warn("compile(): the model is already compiled", stacklevel=2)
            return
        self._compile(self._bind(args, kwargs))

    # -- weights and device ------------------------------------------------------------------
    @property
    def host_stale(self) -> bool:
        """Whether training has changed the device weights since the host last saw them."""
        return self._compiled is not None and self._compiled.sync.host_stale

    @property
    def host_weights_version(self) -> int:
        """Changes each time trained weights reach the host (inference models of the same
        module upload again when it does)."""
        return 0 if self._compiled is None else self._compiled.sync.host_weights_version

    def download(self) -> None:
        """Copy trained weights to the torch module if they are newer (used by its hooks)."""
        if self._compiled is not None:
            self._compiled.sync.download()

    def copyWeightsToHost(self) -> None:  # noqa: N802
        """Copy the device weights into the torch module now."""
        compiled = self._require_compiled()
        compiled.sync.host_stale = compiled.sync.host_stale or self.training
        compiled.sync.download()

    def copyWeightsToDevice(self) -> None:  # noqa: N802
        """Write every torch weight to the device (an inference model sees host edits, other
        than by training, only from here)."""
        self._require_compiled().sync.upload_all()
        self._uploaded_versions = self._trained_versions()

    def detachFromDevice(self) -> None:  # noqa: N802
        """Bring trained weights to the host and release the device."""
        compiled = self._require_compiled()
        if not compiled.session.is_attached:
            raise Error("Device is not attached")
        compiled.sync.download()
        if self.training:
            self._optimizer_state_to_host()  # kept while detached
        compiled.session.__exit__(None, None, None)
        self._write_profile()  # now with the host-side time of the calls

    def attachToDevice(self) -> None:  # noqa: N802
        """Re-attach after ``detachFromDevice``, uploading the host weights."""
        compiled = self._require_compiled()
        if compiled.session.is_attached:
            raise Error("Device is already attached")
        compiled.session.__enter__()
        compiled.sync.upload_changed()
        self._uploaded_versions = self._trained_versions()
        if self.training and not isinstance(self._optimizer, pt_optim.Optimizer):
            self._torch_state_to_device()  # what it held (or loaded) while detached

    def isAttachedToDevice(self) -> bool:  # noqa: N802
        """Whether the compiled model holds the (simulated) device."""
        return self._compiled is not None and self._compiled.session.is_attached

    isAttached = isAttachedToDevice  # noqa: N815 - the name the PopTorch issue text uses

    def isCompiled(self) -> bool:  # noqa: N802
        """Whether the model has been traced and compiled."""
        return self._compiled is not None

    def destroy(self) -> None:
        """Sync weights to the host, drop the compiled program and unwrap the module (nothing
        when not compiled). Later weight copies raise ``poptorch.Error``; a later call
        compiles again (wrapping the module again, for training)."""
        if self._compiled is None:
            return
        self._compiled.sync.download()
        if self._compiled.session.is_attached:
            if self.training:
                self._optimizer_state_to_host()
                # a call with new inputs compiles again from this optimiser state
                self._carried_state = self.read_optimizer_state()
            self._compiled.session.__exit__(None, None, None)
        self._compiled = None
        self._settings, self._stale_step = None, False
        if self.training:
            weights.unhook_module(self._user_model)
            self._hooked = False

    def setOptimizer(self, optimizer: torch.optim.Optimizer) -> None:  # noqa: N802
        """Use ``optimizer``'s settings from now on: new learning rates at once, any other
        variable attribute (momentum, betas, eps, weight_decay, loss_scaling...) from the next
        call. Attributes constant at compilation must keep their value (``poptorch.Error``)."""
        if not self.training:
            raise Error("setOptimizer is only available on a trainingModel")
        if self._compiled is None:
            pt_optim.hyperparameters(optimizer)  # refuse bad values now
        else:
            optim_changes.check_running_mean(self.options, optimizer)
            new, changed = optim_changes.changed_attributes(self._settings, optimizer)
            self._compiled.optimizer.set_lrs(self._compiled.session, [g["lr"] for g in new.groups])
            self._settings = new
            # the other attributes are compiled into the step: the next call rebuilds it,
            # carrying the weights and the optimiser state over
            self._stale_step = self._stale_step or bool(changed - {"lr"})
        self._optimizer = optimizer
        if self._compiled is not None:
            self._bind_optimizer(optimizer)

    def read_optimizer_state(self) -> dict[str, torch.Tensor]:
        """The optimiser's device state by variable name (empty when not attached)."""
        if not self.isAttachedToDevice():
            return {}
        session = self._compiled.session
        return {k: _to_torch(np.asarray(session.get_tensor_data(v)))
                for k, v in self._optimizer_state.items()}

    def write_optimizer_state(self, state: dict[str, Any]) -> None:
        """Write saved device state (all but learning rates, which come from the optimiser)."""
        if not self.isAttachedToDevice():
            return
        for key, value in state.items():
            if key in self._optimizer_state and not key.endswith(".lr"):
                self._compiled.session.write_variable_data(
                    self._optimizer_state[key], np.asarray(value))

    def copyWeightsToHostIfNeeded(self) -> None:  # noqa: N802
        """Copy trained weights to the host only if training changed them since the last copy."""
        self.download()

    def copyNamedBuffersToDevice(self) -> None:  # noqa: N802
        """Upload the buffers named by ``opts.updatableNamedBuffers``, and only those.

        Raises:
            poptorch.Error: no buffer was named updatable.
        """
        compiled = self._require_compiled()
        names = self.options.updatable_named_buffers
        if not names:
            raise Error("No named buffers marked as updatable via updatableNamedBuffers option")
        for name in names:
            if name in compiled.sync.variables:
                compiled.session.write_variable_data(
                    compiled.sync.variables[name],
                    torch_to_numpy(compiled.sync.tensors[name], f"buffer {name!r}"))

    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True) -> Any:
        """Load into the torch module; the device gets the new values before the next call."""
        result = self._user_model.load_state_dict(state_dict, strict)
        if self._compiled is not None and self.isAttachedToDevice():
            self._compiled.sync.upload_changed()
        return result

    def getTensorNames(self) -> list[str]:  # noqa: N802
        """Names ``Options.anchorTensor`` can anchor: the inputs, each parameter and buffer
        (its ``state_dict`` key), ``UpdatedVar___<key>`` and, in training,
        ``Gradient___<key>`` of each trained parameter."""
        compiled = self._require_compiled()
        keys = list(compiled.sync.variables)
        grads = [f"Gradient___{k}" for k in self._grad_keys]
        return [t.name for t in compiled.lowered.data_inputs] + keys + [
            f"UpdatedVar___{k}" for k in keys] + grads

    def getAnchoredTensor(self, short_name: str) -> torch.Tensor:  # noqa: N802
        """The value of the tensor anchored as ``short_name`` after the last call (gradients
        as the anchor's output mode selects them over the call's steps)."""
        if short_name not in self.options.anchored_tensors:
            raise Error(f"getAnchoredTensor: no tensor anchored as {short_name!r}; anchored: "
                        f"{sorted(self.options.anchored_tensors)}")
        compiled = self._require_compiled()
        if short_name in self._anchors:
            return self._anchors[short_name]
        long_name = self.options.anchored_tensors[short_name][0]
        key = _anchor_key(long_name)
        if key not in compiled.sync.variables or long_name.startswith("Gradient___"):
            raise Error(f"getAnchoredTensor: {long_name!r} is not one of getTensorNames() "
                        f"or has no value yet (gradients exist after a training call)")
        data = compiled.session.get_tensor_data(compiled.sync.variables[key])
        return _to_torch(np.asarray(data))

    def cycleCount(self) -> int:  # noqa: N802
        """Estimated cycles of one call on the ipu_model (needs ``opts.logCycleCount(True)``,
        ``useIpuModel(True)`` or ``enableProfiling()``)."""
        compiled = self._require_compiled()
        if compiled.session.device.model is None:
            raise Error("cycleCount(): enable opts.logCycleCount(True) (or useIpuModel(True)) "
                        "so the ipu_model counts cycles")
        return int(round(compiled.session.report().estimated_cycles_per_run))

    def compilationTime(self) -> float:  # noqa: N802
        """Seconds the last compilation took (measured with the compilation progress bar
        on, as PopTorch)."""
        if self._compiled is None:
            raise Error("Please compile the model before obtaining compilation time.")
        if not self.options.show_compilation_progress_bar:
            raise Error("Please set showCompilationProgressBar option to obtain compilation "
                        "time.")
        return self._compile_seconds

    def getPerfCounters(self) -> dict[str, list[Any]]:  # noqa: N802
        """No hardware timers on the simulator: empty counters."""
        return {"input": [], "input_complete": [], "output": [], "output_complete": []}

    def _zero_latency(self) -> tuple[float, float, float]:
        """(min, max, mean) seconds: zeros, there are no hardware timers."""
        return (0.0, 0.0, 0.0)

    getHostIpuLatency = getComputeLatency = getIpuHostLatency = _zero_latency  # noqa: N815

    def getLatency(self) -> tuple[tuple[float, float, float], ...]:  # noqa: N802
        """(host-to-IPU, compute, IPU-to-host) latencies: zeros, there are no timers."""
        return (self._zero_latency(),) * 3

    @property
    def rng_state(self) -> list[int]:
        """The device's dropout seed (``uint32[2]``) as a list."""
        compiled = self._require_compiled()
        seed = compiled.seed
        return [] if seed is None else [int(v) for v in
                                        np.ravel(compiled.session.get_tensor_data(seed))]

    @rng_state.setter
    def rng_state(self, state: list[int]) -> None:
        compiled = self._require_compiled()
        if compiled.seed is not None:
            compiled.session.write_variable_data(
                compiled.seed, np.asarray(state, np.uint32).reshape(compiled.seed.shape))

    def save(self, filename: str, export_model: bool = True, save_rng_state: bool = True,
             ) -> None:
        """Write the compiled model to ``filename`` for ``poptorch.load`` / ``loadExecutable``
        (``executable_file``); the random state is not saved."""
        if not self.isCompiled():
            raise Error("save: the model has not been compiled; call it or compile() first")
        executable_file.save(self, filename, export_model)

    def loadExecutable(self, filename: str) -> None:  # noqa: N802
        """Compile for the inputs ``filename`` was exported with (same model and options)."""
        executable_file.load_executable(self, filename)

    def compileAndExport(self, filename: str, *args: Any, export_model: bool = True,  # noqa: N802
                         **kwargs: Any) -> None:
        """Compile for these arguments and write the result to ``filename``."""
        executable_file.export(self, filename, args, kwargs, export_model)

    # -- the wrapped module ------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "training":
            raise AttributeError(name)
        return getattr(self._user_model, name)

    def __repr__(self) -> str:
        kind = "trainingModel" if self.training else "inferenceModel"
        return f"poptorch.{kind}({self._user_model!r})"


def _user_module(model: Any) -> torch.nn.Module:
    return model._user_model if isinstance(model, PoplarExecutor) else model


def trainingModel(model: torch.nn.Module, options: Options | None = None,  # noqa: N802
                  optimizer: torch.optim.Optimizer | None = None) -> PoplarExecutor:
    """Wrap ``model`` for training: each call runs forward, backward and optimiser steps.

    ``forward`` must compute a torch loss (or ``poptorch.identity_loss``); the default optimizer
    is ``poptorch.optim.SGD(lr=0.01)``.
    """
    return PoplarExecutor(_user_module(model), options, True, optimizer)


def inferenceModel(model: torch.nn.Module, options: Options | None = None,  # noqa: N802
                   ) -> PoplarExecutor:
    """Wrap ``model`` for inference (dropout off; BatchNorm follows the module's mode)."""
    return PoplarExecutor(_user_module(model), options, False)
