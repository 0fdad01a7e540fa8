"""``PoplarExecutor``: a torch module compiled to an xlgraph Session, called like the module.

The first call (or ``compile``) traces the module on one micro-batch, builds the training step
(``xlgraph.training.build_train_step``) or the inference loop (``build_inference``) with
``deviceIterations`` host transfers per run, and attaches a Session. Each call feeds one run and
returns torch tensors shaped by the output mode.
"""

from __future__ import annotations

import copy
import inspect
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as pytree
from tqdm import tqdm

from xlgraph.errors import XlgraphError
from xlgraph.ir import Ir
from xlgraph.poptorch import optim as pt_optim
from xlgraph.poptorch import weights
from xlgraph.poptorch.lowering import Lowered, lower_module, named_tensors, torch_to_numpy
from xlgraph.poptorch.options import Options, OutputMode, ReductionType
from xlgraph.runtime import Session
from xlgraph.tensor import TensorSpec, variable
from xlgraph.training import build_inference, build_train_step

__all__ = ["Error", "PoplarExecutor", "trainingModel", "inferenceModel"]


class Error(XlgraphError, RuntimeError):
    """``poptorch.Error``: misuse of a PopTorch wrapper."""


@dataclass
class _Compiled:
    session: Session
    lowered: Lowered
    sync: weights.WeightSync
    streams: tuple[Any, ...]
    output_streams: tuple[Any, ...]
    loss_stream: Any
    input_specs: list[tuple[tuple[int, ...], torch.dtype]]
    concrete: dict[str, Any]
    optimizer: Any = None


def _compile_bar() -> tqdm:
    return tqdm(total=100, desc="Graph compilation", leave=True,
                bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}]")


def _apply_output_mode(array: np.ndarray, steps: int, replicas: int, mode: OutputMode,
                       period: int) -> np.ndarray:
    """One output of ``steps`` micro-batches on ``replicas`` replicas (stream data: leading
    steps and replica dims, each only when > 1) as PopTorch returns it."""
    lead = sum(n > 1 for n in (steps, replicas))
    grid = array.reshape((steps, replicas) + array.shape[lead:])
    if mode == OutputMode.Final:
        grid = grid[-1:]
    elif mode == OutputMode.Sum:
        grid = grid.sum(axis=0, keepdims=True)
    elif mode == OutputMode.EveryN:
        grid = grid[period - 1::period]
    count = grid.shape[0] * grid.shape[1]
    if count == 1:
        return grid[0, 0]
    if grid.ndim == 2:  # a scalar per micro-batch becomes a vector
        return grid.reshape(count)
    return grid.reshape((count * grid.shape[2],) + grid.shape[3:])


def _to_torch(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(array, order="C"))  # 0-d stays 0-d


class PoplarExecutor:
    """A wrapped module: call it with ``forward``'s arguments (dim 0 = batch x iterations)."""

    def __init__(self, model: torch.nn.Module, options: Options | None, training: bool,
                 optimizer: torch.optim.Optimizer | None = None) -> None:
        options = options if options is not None else Options()
        options.freeze()
        self.options = options.clone()
        if not training and self.options.Training.gradient_accumulation != 1:
            raise Error("inferenceModel needs Training.gradientAccumulation(1)")
        self.training = training
        self._user_model = model
        self.model = copy.copy(model)  # parameters shared; the training flag is frozen here
        self._signature = inspect.signature(model.forward)
        self._optimizer = optimizer
        if training and optimizer is None:
            self._optimizer = pt_optim.SGD(model.parameters(), lr=0.01)
        if training:
            pt_optim.hyperparameters(self._optimizer)  # refuse unsupported optimisers now
        self._compiled: _Compiled | None = None
        if training:
            weights.hook_module(model, self)

    # -- compilation -------------------------------------------------------------------------
    @property
    def _steps(self) -> int:
        """Micro-batches per call and replica (device iterations x gradient accumulation)."""
        return self.options.device_iterations * self.options.Training.gradient_accumulation

    @property
    def _replicas(self) -> int:
        return self.options.replication_factor

    def _lead(self) -> tuple[int, ...]:
        """The leading dims of stream data: transfers, then replicas (each only when > 1)."""
        return tuple(n for n in (self._steps, self._replicas) if n > 1)

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return dict(bound.arguments)

    def compile(self, *args: Any, **kwargs: Any) -> None:
        """Trace and compile for these arguments, then attach (the first call does it too)."""
        if self._compiled is not None:
            warnings.warn("compile(): the model is already compiled", stacklevel=2)
            return
        self._compile(self._bind(args, kwargs))

    def _micro_batch(self, name: str, t: torch.Tensor) -> torch.Tensor:
        steps = self._steps * self._replicas
        size = t.shape[0] if t.dim() else "none"
        if not (t.dim() > 0 and t.shape[0] % steps == 0 and t.shape[0] >= steps):
            raise Error(
                f"Invalid batch dimension: in the input {name}, the batch dimension ({size}) must "
                f"be a multiple of device iterations x replication factor x gradient accumulation "
                f"({steps})")
        return t[: t.shape[0] // steps]

    def _compile(self, args: dict[str, Any]) -> None:
        bar = _compile_bar()
        sample = {k: self._micro_batch(k, v) if isinstance(v, torch.Tensor) else v
                  for k, v in args.items()}
        ir = Ir(replication=self._replicas)
        lowered = lower_module(ir, self.model, sample, self.training)
        bar.update(40)
        tensors = named_tensors(self.model)
        with ir.main_graph:
            variables = {k: variable(torch_to_numpy(tensors[k]), name=k)
                         for k in lowered.params.values()}
        params = {t: variables[k] for t, k in lowered.params.items()}
        specs = [TensorSpec(t.shape, t.dtype) for t in lowered.data_inputs]
        if self.training:
            xl_optimizer = pt_optim.to_xlgraph(self._optimizer)
            trained = pt_optim.parameter_ids(self._optimizer)
            frozen = [k for k in variables if id(tensors[k]) not in trained
                      or not tensors[k].requires_grad]
            index = lowered.loss_index
            seed = None
            if lowered.seed is not None:
                seed = self.options.random_seed
                seed = int(torch.randint(0, 2**31 - 1, ()).item()) if seed is None else seed
            reduction = self.options.Training.accumulation_and_replication_reduction_type
            step = build_train_step(
                ir, lowered.graph, lambda outs: outs if index is None else outs[index],
                xl_optimizer, specs, params=params, seed=seed, seed_input=lowered.seed,
                store_outputs=True, frozen=frozen, updates=lowered.buffer_updates,
                num_host_transfers=self.options.device_iterations,
                accumulation=self.options.Training.gradient_accumulation,
                accumulation_reduction="sum" if reduction == ReductionType.Sum else "mean")
            streams, loss_stream = step.streams, step.loss_stream
            out_streams = step.output_streams[: len(lowered.outputs)]
        else:
            xl_optimizer, loss_stream = None, None
            step = build_inference(ir, lowered.graph, specs, params=params,
                                   num_host_transfers=self._steps)
            streams, out_streams = step.streams, step.output_streams
        bar.update(30)
        device = "ipu_model" if self.options.use_ipu_model else "cpu"
        session = Session(ir, device)
        sync = weights.WeightSync(session, variables, tensors, torch_to_numpy)
        input_specs = [(tuple(v.shape), v.dtype) for v in args.values()
                       if isinstance(v, torch.Tensor)]
        concrete = {k: v for k, v in args.items() if not isinstance(v, torch.Tensor)}
        self._compiled = _Compiled(session, lowered, sync, streams, out_streams, loss_stream,
                                   input_specs, concrete, xl_optimizer)
        session.__enter__()
        bar.update(30)
        bar.close()

    # -- calling -----------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        bound = self._bind(args, kwargs)
        if self._compiled is None:
            self._compile(bound)
        compiled = self._compiled
        tensors = [v for v in bound.values() if isinstance(v, torch.Tensor)]
        got = [(tuple(t.shape), t.dtype) for t in tensors]
        if got != compiled.input_specs or {k: v for k, v in bound.items()
                                           if not isinstance(v, torch.Tensor)} != compiled.concrete:
            raise Error(f"Shape mismatch for the inputs: compiled for {compiled.input_specs} and "
                        f"{compiled.concrete}, got {got}; create a new wrapper or call destroy()")
        if not compiled.session.is_attached:
            self.attachToDevice()
        if not self.training:
            weights.download_all()
        compiled.sync.upload_changed()
        lead = self._lead()
        feeds = {stream: torch_to_numpy(t).reshape(lead + stream.shape)
                 for stream, t in zip(compiled.streams, tensors)}
        out = compiled.session.run(feeds)
        if self.training:
            compiled.sync.host_stale = True
            # the device stepped the optimizer: flag it as optimizer.step() does, so torch's LR
            # schedulers know the step came before theirs
            self._optimizer._opt_called = True
        mode = self.options.resolved_output_mode(self.training)
        period = self.options.output_return_period
        results = [_to_torch(_apply_output_mode(out[s], self._steps, self._replicas, mode,
                                                period)) for s in compiled.output_streams]
        return pytree.tree_unflatten(results, compiled.lowered.out_spec)

    # -- weights and device ------------------------------------------------------------------
    @property
    def host_stale(self) -> bool:
        """Whether training has changed the device weights since the host last saw them."""
        return self._compiled is not None and self._compiled.sync.host_stale

    def download(self) -> None:
        """Copy trained weights to the torch module if they are newer (used by its hooks)."""
        if self._compiled is not None:
            self._compiled.sync.download()

    def _require_compiled(self) -> _Compiled:
        if self._compiled is None:
            raise Error("Model has not been compiled or has been destroyed.")
        return self._compiled

    def copyWeightsToHost(self) -> None:  # noqa: N802
        """Copy the device weights into the torch module now."""
        compiled = self._require_compiled()
        compiled.sync.host_stale = compiled.sync.host_stale or self.training
        compiled.sync.download()

    def copyWeightsToDevice(self) -> None:  # noqa: N802
        """Write every torch weight to the device."""
        self._require_compiled().sync.upload_all()

    def detachFromDevice(self) -> None:  # noqa: N802
        """Bring trained weights to the host and release the device."""
        compiled = self._require_compiled()
        if not compiled.session.is_attached:
            raise Error("Device is not attached")
        compiled.sync.download()
        compiled.session.__exit__(None, None, None)

    def attachToDevice(self) -> None:  # noqa: N802
        """Re-attach after ``detachFromDevice``, uploading the host weights."""
        compiled = self._require_compiled()
        if compiled.session.is_attached:
            raise Error("Device is already attached")
        compiled.session.__enter__()
        compiled.sync.upload_changed()

    def isAttachedToDevice(self) -> bool:  # noqa: N802
        """Whether the compiled model holds the (simulated) device."""
        return self._compiled is not None and self._compiled.session.is_attached

    isAttached = isAttachedToDevice  # noqa: N815 - the name the PopTorch issue text uses

    def isCompiled(self) -> bool:  # noqa: N802
        """Whether the model has been traced and compiled."""
        return self._compiled is not None

    def destroy(self) -> None:
        """Sync weights to the host, drop the compiled program and unwrap the module."""
        if self._compiled is not None:
            self._compiled.sync.download()
            if self._compiled.session.is_attached:
                self._compiled.session.__exit__(None, None, None)
            self._compiled = None
        if self.training:
            weights.unhook_module(self._user_model)

    def setOptimizer(self, optimizer: torch.optim.Optimizer) -> None:  # noqa: N802
        """Use ``optimizer``'s learning rate from now on (other settings must not change)."""
        if not self.training:
            raise Error("setOptimizer is only available on a trainingModel")
        new = pt_optim.hyperparameters(optimizer)
        if self._compiled is not None:
            old = pt_optim.hyperparameters(self._optimizer)
            changed = sorted(k for k in new if k != "lr" and new[k] != old[k])
            if changed or type(optimizer) is not type(self._optimizer):
                raise Error(f"setOptimizer: only the learning rate can change after "
                            f"compilation; {changed or 'the optimizer type'} changed")
            self._compiled.optimizer.set_lr(self._compiled.session, new["lr"])
        self._optimizer = optimizer

    # -- the wrapped module ------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in ("model", "options", "training"):
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
