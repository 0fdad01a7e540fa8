"""``PoplarExecutor``: a torch module compiled to an xlgraph Session, called like the module.

The first call (or ``compile``) traces the module on one micro-batch, builds the training step
(``xlgraph.training.build_train_step``) or the inference loop (``build_inference``) with
``deviceIterations`` host transfers per run, and attaches a Session. Each call feeds one run and
returns torch tensors shaped by the output mode.
"""

from __future__ import annotations

import copy
import inspect
import os
import sys
import time
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as pytree
from tqdm import tqdm as raw_tqdm

from xlgraph.ipu import IPUModel
from xlgraph.ir import Ir
from xlgraph.poptorch import optim as pt_optim
from xlgraph.poptorch import optim_state, weights
from xlgraph.poptorch.blocks import custom_structures, recorded_blocks, static_blocks
from xlgraph.poptorch.enums import (
    CommGroupType,
    HalfFloatCastingBehavior,
    OutputMode,
    ReductionType,
)
from xlgraph.poptorch.fastcall import FastCall
from xlgraph.poptorch.lowering import (
    Lowered,
    flat_tensors,
    lower_module,
    named_tensors,
    torch_to_numpy,
)
from xlgraph.poptorch.options import Options
from xlgraph.poptorch.support import Error, refuse
from xlgraph.progress import tqdm
from xlgraph.runtime import Session
from xlgraph.tensor import TensorSpec, variable
from xlgraph.training import build_inference, build_train_step

__all__ = ["Error", "PoplarExecutor", "trainingModel", "inferenceModel",
           "registerPostCompileHook"]

_POST_COMPILE_HOOKS: list[Callable[[], None]] = []


@dataclass
class _Compiled:
    session: Session
    lowered: Lowered
    sync: weights.WeightSync
    streams: tuple[Any, ...]
    output_streams: tuple[Any, ...]
    loss_stream: Any
    input_specs: list[tuple[tuple[int, ...], torch.dtype]]
    concrete: list[Any]
    fast: FastCall | None
    optimizer: Any = None
    seed: Any = None


class _HookHandle:
    def __init__(self, hook: Callable[[], None]) -> None:
        self.hook = hook

    def remove(self) -> None:
        if self.hook in _POST_COMPILE_HOOKS:
            _POST_COMPILE_HOOKS.remove(self.hook)


def registerPostCompileHook(hook: Callable[[], None]) -> _HookHandle:  # noqa: N802
    """Call ``hook()`` after every compilation of a wrapped model; ``.remove()`` the handle
    to stop."""
    if not callable(hook):
        raise TypeError(f"registerPostCompileHook: {hook!r} is not callable")
    _POST_COMPILE_HOOKS.append(hook)
    return _HookHandle(hook)


def _compile_bar(show: bool) -> tqdm:
    """The "Graph compilation" bar: only on a terminal (tqdm's ``disable=None``), off with
    ``opts.showCompilationProgressBar(False)`` (which ``XLGRAPH_PROGRESS=1`` does not
    override); ``XLGRAPH_PROGRESS=0`` hides it and ``=1`` shows it on any stream."""
    bar = tqdm if show else raw_tqdm
    return bar(total=100, desc="Graph compilation", leave=True, file=sys.stdout,
               disable=None if show else True,
               bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}]")


def _ipu_model(options: Options, blocks: dict[str, int | None]) -> IPUModel | None:
    """The chip ``useIpuModel``/``logCycleCount``/``enableProfiling`` model: whole IPUs of
    1,472 tiles (4 under ``POPTORCH_SMALL_IPU_MODEL``), as many as the blocks and stages use."""
    if not (options.use_ipu_model or options.log_cycle_count or options.profile_dir):
        return None
    strategy = options.execution_strategy
    ipus = {i for i in blocks.values() if i is not None}
    num_ipus = strategy.num_ipus(blocks) if strategy is not None else max(ipus, default=0) + 1
    tiles = 4 if os.environ.get("POPTORCH_SMALL_IPU_MODEL") else 1472
    version = "ipu21" if options.offline_ipu_version == 21 else "ipu2"
    return IPUModel(ipu_version=version, num_ipus=num_ipus, tiles_per_ipu=tiles)


class BatchDimensionError(Error, AssertionError):
    """An input's batch dimension is not a multiple of the micro-batches per call (PopTorch
    asserts it, so it is an ``AssertionError`` as well as a ``poptorch.Error``)."""


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


def _concrete(bound: dict[str, Any]) -> list[Any]:
    """The non-tensor leaves of ``forward``'s arguments and of its custom-class arguments
    (baked into the compiled graph)."""
    values = list(bound.values())
    return [v for v in pytree.tree_leaves(values) if not isinstance(v, torch.Tensor)] + \
        custom_structures(values)


def _anchor_key(long_name: str) -> str:
    """The ``state_dict`` key an anchor names (``Gradient___model.fc.weight`` -> ``fc.weight``)."""
    for prefix in ("Gradient___", "UpdatedVar___"):
        long_name = long_name.removeprefix(prefix)
    return long_name.removeprefix("model.")


def _to_torch(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(array, order="C"))  # 0-d stays 0-d


class PoplarExecutor:
    """A wrapped module: call it with ``forward``'s arguments (dim 0 = batch x iterations)."""

    def __init__(self, model: torch.nn.Module, options: Options | None, training: bool,
                 optimizer: torch.optim.Optimizer | None = None) -> None:
        options = options if options is not None else Options()
        if not isinstance(options, Options):
            raise TypeError(f"expected a poptorch.Options, got {type(options).__name__}")
        options.freeze()
        self._options = options.clone()
        if not training and self._options.Training.gradient_accumulation != 1:
            raise Error("inferenceModel needs Training.gradientAccumulation(1)")
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

    @property
    def _input_replicas(self) -> int:
        """Distinct inputs per micro-batch: replicas / ``inputReplicaGrouping`` group size."""
        return self._replicas // max(self.options.input_group_size, 1)

    def _micro_batch(self, name: str, t: torch.Tensor) -> torch.Tensor:
        steps = self._steps * self._input_replicas
        if steps == 1:
            return t  # one micro-batch per call: any shape, 0-d included
        size = t.shape[0] if t.dim() else "none"
        if not (t.dim() > 0 and t.shape[0] % steps == 0 and t.shape[0] >= steps):
            raise BatchDimensionError(
                f"Invalid batch dimension: in the input {name}, the batch dimension ({size}) must "
                f"be a multiple of device iterations x replication factor / input group size x "
                f"gradient accumulation ({steps})")
        return t[: t.shape[0] // steps]

    def _replica_inputs(self) -> np.ndarray:
        """Which of the call's per-replica input slices each replica reads."""
        distinct, replicas = self._input_replicas, np.arange(self._replicas)
        if self.options.input_group_type == CommGroupType.Orthogonal:
            return replicas % distinct
        return replicas // (self._replicas // distinct)

    def _feed(self, stream: Any, t: torch.Tensor, name: str) -> np.ndarray:
        array = torch_to_numpy(t, f"input {name!r}")
        if self.options.synthetic_data:
            array = np.zeros_like(array)
        grid = array.reshape((self._steps, self._input_replicas) + stream.shape)
        if self._input_replicas != self._replicas:
            grid = grid[:, self._replica_inputs()]
        return grid.reshape(self._lead() + stream.shape)

    def _seed(self, lowered: Lowered) -> int | None:
        """The first seed of the model's random ops: ``opts.randomSeed``, else drawn from
        torch's generator (None when it has none)."""
        if lowered.seed is None:
            return None
        seed = self.options.random_seed
        return int(torch.randint(0, 2**31 - 1, ()).item()) if seed is None else seed

    def _compile(self, args: dict[str, Any]) -> None:
        start = time.perf_counter()
        bar = _compile_bar(self.options.show_compilation_progress_bar)
        sample = {k: pytree.tree_map_only(torch.Tensor, lambda t, k=k: self._micro_batch(k, t), v)
                  for k, v in args.items()}
        ir = Ir(replication=self._replicas)
        with recorded_blocks() as blocks:
            lowered = lower_module(
                ir, self._traced, sample, self.training, downcast_half=(
                    self.options.Precision.half_float_casting
                    == HalfFloatCastingBehavior.FloatDowncastToHalf))
        blocks.update(static_blocks(self._traced))
        bar.update(40)
        tensors = named_tensors(self._traced)
        with ir.main_graph:
            variables = {k: variable(torch_to_numpy(tensors[k], f"parameter {k!r}"), name=k)
                         for k in lowered.params.values()}
        params = {t: variables[k] for t, k in lowered.params.items()}
        specs = [TensorSpec(t.shape, t.dtype) for t in lowered.data_inputs]
        if self.training:
            self._state_keys = {id(t): k for k, t in tensors.items()}
            xl_optimizer = pt_optim.to_xlgraph(self._optimizer, self._state_keys)
            trained = pt_optim.parameter_ids(self._optimizer)
            frozen = [k for k in variables if id(tensors[k]) not in trained
                      or not tensors[k].requires_grad]
            self._grad_keys = [k for k in variables if k not in frozen]
            index = lowered.loss_index
            seed = self._seed(lowered)
            reduction = self.options.Training.accumulation_and_replication_reduction_type
            scale = pt_optim.loss_scaling(self._optimizer)

            def loss(outs: Any) -> Any:  # scaled: the optimiser unscales the gradients
                single = not isinstance(outs, (list, tuple))  # one forward output
                value = outs if index is None or single else outs[index]
                return value * scale if scale != 1.0 else value

            step = build_train_step(
                ir, lowered.graph, loss, xl_optimizer, specs, params=params, seed=seed,
                seed_input=lowered.seed,
                store_outputs=True, store_grads=self._anchored_gradients(),
                frozen=frozen, updates=lowered.buffer_updates,
                num_host_transfers=self.options.device_iterations,
                accumulation=self.options.Training.gradient_accumulation,
                accumulation_reduction="sum" if reduction == ReductionType.Sum else "mean")
            streams, loss_stream, seed_var = step.streams, step.loss_stream, step.seed
            out_streams = step.output_streams[: len(lowered.outputs)]
            self._grad_streams = dict(step.grad_streams or {})
            self._optimizer_state = dict(step.state)
        else:
            xl_optimizer, loss_stream = None, None
            step = build_inference(ir, lowered.graph, specs, params=params,
                                   num_host_transfers=self._steps,
                                   updates=lowered.buffer_updates, seed=self._seed(lowered),
                                   seed_input=lowered.seed)
            streams, out_streams, seed_var = step.streams, step.output_streams, step.seed
        bar.update(30)
        if self.options.TensorLocations.num_io_tiles:
            ir.session_options.numIOTiles = self.options.TensorLocations.num_io_tiles
        model = _ipu_model(self.options, blocks)
        session = Session(ir, "cpu" if model is None else "ipu_model", ipu_model=model,
                          check_numerics=self.options.Precision.floating_point_exceptions)
        sync = weights.WeightSync(session, variables, self._traced, torch_to_numpy)
        input_specs = [(tuple(v.shape), v.dtype) for v in flat_tensors(args)]
        concrete = _concrete(args)
        fast = FastCall.plan(self._signature, input_specs, concrete, self._steps, self._replicas,
                             self.options.synthetic_data, self.options.output_mode, streams,
                             out_streams, lowered.output_dtypes, lowered.constant_outputs,
                             session.io.d2h, lowered.out_spec)
        self._compiled = _Compiled(session, lowered, sync, streams, out_streams, loss_stream,
                                   input_specs, concrete, fast, xl_optimizer, seed_var)
        self.blocks = dict(blocks)
        session.__enter__()
        if self.training:
            self._bind_optimizer(self._optimizer)
        bar.update(30)
        bar.close()
        self._compile_seconds = time.perf_counter() - start
        self._write_profile()
        for hook in list(_POST_COMPILE_HOOKS):
            hook()

    # -- calling -----------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        compiled = self._compiled
        fast = None if compiled is None or kwargs else compiled.fast
        feeds = None if fast is None else fast.feeds(args)
        if feeds is None:  # the general path: bind, check the signature, convert
            fast = None
            compiled, feeds = self._prepare(self._bind(args, kwargs))
        if not compiled.session.is_attached:
            self.attachToDevice()
        if not self.training:
            weights.fetch_trained(self._user_model)
        compiled.sync.upload_changed()
        if fast is not None:
            out, tensors = fast.output_arrays()
            compiled.session.run_with_outputs(feeds, out)
        else:
            out = compiled.session.run(feeds)
        if self.training:
            compiled.sync.host_stale = True
            self._optimizer_steps += self.options.device_iterations
            # the device stepped the optimizer: flag it as optimizer.step() does, so torch's LR
            # schedulers know the step came before theirs
            self._optimizer._opt_called = True
            if self._grad_streams:
                self._keep_anchored_gradients(out)
        elif compiled.lowered.buffer_updates:  # buffers forward updated keep their new values
            compiled.sync.host_stale = True
            compiled.sync.download()
        if fast is not None:
            return fast.results(tensors)
        mode = self.options.output_mode
        period = self.options.output_return_period
        results = [_to_torch(_apply_output_mode(out[s], self._steps, self._replicas, mode,
                                                period)).to(dtype)
                   for s, dtype in zip(compiled.output_streams, compiled.lowered.output_dtypes)]
        return pytree.tree_unflatten(compiled.lowered.results(results), compiled.lowered.out_spec)

    def _prepare(self, bound: dict[str, Any]) -> tuple[_Compiled, dict[Any, np.ndarray]]:
        """Compile for ``bound`` if needed (again for a new input signature, as PopTorch does)
        and convert its tensors to stream data."""
        if self._compiled is None:
            self._compile(bound)
        compiled = self._compiled
        tensors = flat_tensors(bound)
        if any(t.requires_grad for t in tensors):
            warnings.warn("Input tensor has requires_grad=True set. This tensor will be "
                          "detached: the backward pass through inputs is not supported "
                          "(as in PopTorch)", stacklevel=3)
        got = [(tuple(t.shape), t.dtype) for t in tensors]
        if got != compiled.input_specs or _concrete(bound) != compiled.concrete:
            compiled.sync.download()
            # the new program goes on from the optimiser state of the old one
            carried, steps = self.read_optimizer_state(), self._optimizer_steps
            if compiled.session.is_attached:
                compiled.session.__exit__(None, None, None)
            self._compiled = None
            self._compile(bound)
            self.write_optimizer_state(carried)
            self._optimizer_steps = steps
            compiled = self._compiled
        names = [t.name for t in compiled.lowered.data_inputs]
        return compiled, {stream: self._feed(stream, t, name)
                          for stream, t, name in zip(compiled.streams, tensors, names)}

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
        if self.training:
            self._optimizer_state_to_host()  # kept while detached
        compiled.session.__exit__(None, None, None)
        self._write_profile()  # now with the host-side time of the calls

    def _write_profile(self) -> None:
        """With ``enableProfiling(dir)``: the report as ``dir/profile.json``."""
        if self.options.profile_dir:
            os.makedirs(self.options.profile_dir, exist_ok=True)
            self._compiled.session.report().save(
                os.path.join(self.options.profile_dir, "profile.json"))

    def attachToDevice(self) -> None:  # noqa: N802
        """Re-attach after ``detachFromDevice``, uploading the host weights."""
        compiled = self._require_compiled()
        if compiled.session.is_attached:
            raise Error("Device is already attached")
        compiled.session.__enter__()
        compiled.sync.upload_changed()
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
        """Sync weights to the host, drop the compiled program and unwrap the module."""
        if self._compiled is not None:
            self._compiled.sync.download()
            if self._compiled.session.is_attached:
                if self.training:
                    self._optimizer_state_to_host()
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
            changed = sorted({k for n, o in zip(new, old) for k in n
                              if k != "lr" and n[k] != o.get(k)})
            if changed or len(new) != len(old) or not pt_optim.same_kind(optimizer,
                                                                        self._optimizer):
                raise Error(f"setOptimizer: only learning rates can change after compilation; "
                            f"{changed or 'the optimizer type or its groups'} changed")
            self._compiled.optimizer.set_lrs(self._compiled.session, [g["lr"] for g in new])
        self._optimizer = optimizer
        if self._compiled is not None:
            self._bind_optimizer(optimizer)

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
        """Upload the buffers named by ``opts.updatableNamedBuffers`` (all buffers if none)."""
        compiled = self._require_compiled()
        names = self.options.updatable_named_buffers or [
            k for k, _ in self._user_model.named_buffers()]
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
        """Seconds the last compilation took."""
        self._require_compiled()
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
        """Refused: executables are not cached to disk."""
        refuse("PoplarExecutor.save")

    def loadExecutable(self, filename: str) -> None:  # noqa: N802
        """Refused: executables are not cached to disk."""
        refuse("PoplarExecutor.loadExecutable")

    def compileAndExport(self, filename: str, *args: Any, export_model: bool = True,  # noqa: N802
                         **kwargs: Any) -> None:
        """Refused: executables are not cached to disk."""
        refuse("PoplarExecutor.compileAndExport")

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
