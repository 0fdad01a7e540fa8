"""The compile step of a ``PoplarExecutor``: trace the module on one micro-batch, build the
training step or inference loop, make and attach the Session, run the post-compile hooks.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree
from tqdm import tqdm as raw_tqdm

from xlgraph.ipu import IPUModel
from xlgraph.ir import Ir
from xlgraph.poptorch import optim as pt_optim
from xlgraph.poptorch import optim_changes, replica_grouped, weights
from xlgraph.poptorch.blocks import custom_structures, recorded_blocks, static_blocks
from xlgraph.poptorch.compile_hooks import (
    registerPostCompileHook,
    registerPreCompileHook,
    run_post_compile_hooks,
    run_pre_compile_hooks,
)
from xlgraph.poptorch.enums import (
    HalfFloatCastingBehavior,
    ReductionType,
)
from xlgraph.poptorch.fastcall import FastCall
from xlgraph.poptorch.input_match import CompiledInputs
from xlgraph.poptorch.lowering import (
    Lowered,
    flat_tensors,
    lower_module,
    named_tensors,
    torch_to_numpy,
)
from xlgraph.poptorch.narrowing import warn_narrowed
from xlgraph.poptorch.option_rules import check_compile_options
from xlgraph.poptorch.options import Options
from xlgraph.poptorch.support import Error
from xlgraph.progress import tqdm
from xlgraph.runtime import Session
from xlgraph.tensor import TensorSpec, variable
from xlgraph.training import build_inference, build_train_step

__all__ = ["registerPostCompileHook", "registerPreCompileHook"]


@dataclass
class _Compiled:
    session: Session
    lowered: Lowered
    sync: weights.WeightSync
    streams: tuple[Any, ...]
    output_streams: tuple[Any, ...]
    loss_stream: Any
    inputs: CompiledInputs  # what every later call must give (``check``)
    input_updates: dict[Any, int]  # {stream: position among the inputs} of in-place inputs
    fast: FastCall | None
    optimizer: Any = None
    seed: Any = None


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


def _concrete(bound: dict[str, Any]) -> list[Any]:
    """The non-tensor leaves of ``forward``'s arguments and of its custom-class arguments
    (baked into the compiled graph)."""
    values = list(bound.values())
    return [v for v in pytree.tree_leaves(values) if not isinstance(v, torch.Tensor)] + \
        custom_structures(values)


class _CompileStep:
    """``PoplarExecutor``'s compilation: ``_compile`` makes its ``_Compiled``."""

    def _seed(self, lowered: Lowered) -> int | None:
        """The first seed of the model's random ops: ``opts.randomSeed``, else drawn from
        torch's generator (None when it has none)."""
        if lowered.seed is None:
            return None
        seed = self.options.random_seed
        return int(torch.randint(0, 2**31 - 1, ()).item()) if seed is None else seed

    def _compile(self, args: dict[str, Any]) -> None:
        self._compiled_args = args  # the signature save() exports
        run_pre_compile_hooks()
        if self.training and not self._hooked:  # compiled again after destroy()
            weights.hook_module(self._user_model, self)
            self._hooked = True
        # an inference model starts from the trained weights of the module's training models
        self._uploaded_versions = self._trained_versions()
        start = time.perf_counter()
        bar = _compile_bar(self.options.show_compilation_progress_bar)
        sample = {k: pytree.tree_map_only(torch.Tensor, lambda t, k=k: self._micro_batch(k, t), v)
                  for k, v in args.items()}
        ir = Ir(replication=self._replicas)
        groupings = replica_grouped.groupings(self._traced, self._replicas)
        with recorded_blocks() as blocks, replica_grouped.traced_per_replica(self._traced,
                                                                             groupings):
            lowered = lower_module(
                ir, self._traced, sample, self.training, downcast_half=(
                    self.options.Precision.half_float_casting
                    == HalfFloatCastingBehavior.FloatDowncastToHalf))
        if self.training and self._replicas > 1 and self.options.broadcast_buffers and \
                lowered.buffer_updates:
            raise Error("PopTorch does not support broadcasting buffers. If your model is able "
                        "to tolerate buffers becoming out of sync between replicas, you can "
                        "disable buffer broadcasting using "
                        "poptorch.Options.broadcastBuffers(False).")
        buffers = dict(self._traced.named_buffers())
        unknown = [n for n in self.options.updatable_named_buffers if n not in buffers]
        if unknown:
            raise Error(f"updatableNamedBuffers: {unknown} are not buffers of the model; its "
                        f"buffers are {sorted(buffers)}")
        recorded = dict(blocks)  # the blocks entered, in order (static ones may repeat them)
        blocks.update(static_blocks(self._traced))
        check_compile_options(self.options, self.training, recorded or blocks)
        bar.update(40)
        tensors = named_tensors(self._traced)
        warn_narrowed([(f"input {t.name!r}", v.dtype) for t, v in
                       zip(lowered.data_inputs, flat_tensors(args))] +
                      [(f"parameter {k!r}", tensors[k].dtype) for k in lowered.params.values()])
        with ir.main_graph:
            variables = {k: variable(torch_to_numpy(tensors[k], f"parameter {k!r}"), name=k,
                                     replica_grouping=groupings.get(k))
                         for k in lowered.params.values()}
        params = {t: variables[k] for t, k in lowered.params.items()}
        specs = [TensorSpec(t.shape, t.dtype) for t in lowered.data_inputs]
        if self.training:
            self._state_keys = {id(t): k for k, t in tensors.items()}
            # the settings last applied (at compilation or by setOptimizer): param_groups
            # changes made since without setOptimizer do not reach the device, as in PopTorch
            if self._settings is None:
                optim_changes.use_running_mean(self.options, self._optimizer)
                self._settings = optim_changes.settings_of(self._optimizer)
            self._stale_step = False
            xl_optimizer = pt_optim.to_xlgraph(self._optimizer, self._state_keys,
                                               settings=self._settings.groups,
                                               extras=self._settings.extras)
            trained = pt_optim.parameter_ids(self._optimizer)
            frozen = [k for k in variables if id(tensors[k]) not in trained
                      or not tensors[k].requires_grad]
            self._grad_keys = [k for k in variables if k not in frozen]
            index = lowered.loss_index
            seed = self._seed(lowered)
            reduction = self.options.Training.accumulation_and_replication_reduction_type
            scale = xl_optimizer.loss_scaling

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
            every = step.output_streams  # each graph output of the forward has a stream
            self._grad_streams = dict(step.grad_streams or {})
            self._optimizer_state = dict(step.state)
        else:
            xl_optimizer, loss_stream = None, None
            step = build_inference(ir, lowered.graph, specs, params=params,
                                   num_host_transfers=self._steps,
                                   updates=lowered.buffer_updates, seed=self._seed(lowered),
                                   seed_input=lowered.seed)
            streams, out_streams, seed_var = step.streams, step.output_streams, step.seed
            every = dict(zip([i for i in range(len(lowered.graph.outputs))
                              if i not in lowered.buffer_updates], step.output_streams))
        bar.update(30)
        if self.options.TensorLocations.num_io_tiles:
            ir.session_options.numIOTiles = self.options.TensorLocations.num_io_tiles
        model = _ipu_model(self.options, blocks)
        session = Session(ir, "cpu" if model is None else "ipu_model", ipu_model=model,
                          check_numerics=self.options.Precision.floating_point_exceptions)
        sync = weights.WeightSync(session, variables, self._traced, torch_to_numpy)
        input_specs = [(tuple(v.shape), v.dtype) for v in flat_tensors(args)]
        concrete = _concrete(args)
        input_updates = {every[i]: pos for i, pos in lowered.input_updates.items()}
        fast = None if input_updates else FastCall.plan(
            self._signature, input_specs, concrete, self._steps, self._replicas,
            self.options.synthetic_data, self.options.output_mode, streams, out_streams,
            lowered.output_dtypes, lowered.constant_outputs, session.io.d2h, lowered.out_spec)
        self._compiled = _Compiled(session, lowered, sync, streams, out_streams, loss_stream,
                                   CompiledInputs.of(args, self._signature), input_updates, fast,
                                   xl_optimizer, seed_var)
        self.blocks = dict(blocks)
        session.__enter__()
        if self.training:
            self._bind_optimizer(self._optimizer)
            self.write_optimizer_state(self._carried_state)
            self._carried_state = {}
        bar.update(30)
        bar.close()
        self._compile_seconds = time.perf_counter() - start
        self._write_profile()
        run_post_compile_hooks()
