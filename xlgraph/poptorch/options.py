"""``poptorch.Options``, its sub-objects and the execution strategies, with PopTorch's setters.

Every setter returns the object it was called on, values read back as snake_case attributes
(``opts.device_iterations``), types are checked against the default's, and an ``Options`` given
to a wrapper or ``DataLoader`` is frozen. ``docs/poptorch-support.md`` says what each setter does
on the simulator (works, recorded for the ipu_model, or accepted and ignored).
"""

from __future__ import annotations

import copy
import enum
import json
import os
from typing import Any

import torch

from xlgraph.poptorch import enums
from xlgraph.poptorch.checks import OptionValueError, whole
from xlgraph.poptorch.enums import (
    AutoStage,
    CommGroupType,
    ConnectionType,
    HalfFloatCastingBehavior,
    Liveness,
    MeanReductionStrategy,
    OutputMode,
    ReductionType,
    SyncPattern,
)
from xlgraph.poptorch.options_file import parse_call
from xlgraph.poptorch.support import SUPPORT_PAGE, unknown

__all__ = [
    "Attribute", "ConfigFileError", "OptionsDict", "Options", "TensorLocationSettings",
    "Stage", "Phase", "PipelinedExecution", "ShardedExecution", "ParallelPhasedExecution",
    "SerialPhasedExecution", "IStageManager", "ProgressBar",
]


class ConfigFileError(Exception):
    """An options file (``Options.loadFromFile``) that cannot be applied."""


class OptionsDict:
    """A dict of named options read back as attributes; frozen once handed to a wrapper.

    Example:
        >>> d = OptionsDict(size=1)
        >>> d.set(size=4).size
        4
    """

    def __init__(self, **default_values: Any) -> None:
        object.__setattr__(self, "_values", dict(default_values))
        object.__setattr__(self, "_frozen", False)

    def __repr__(self) -> str:
        """``ClassName(option=value, ...)``, values by their ``repr`` (PopTorch's form)."""
        return f"{type(self).__name__}(" + ", ".join(
            f"{k}={v!r}" for k, v in self._values.items()) + ")"

    def __getattr__(self, name: str) -> Any:
        values = self.__dict__.get("_values", {})
        if name in values:
            return values[name]
        raise unknown(type(self).__name__.lstrip("_"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("_"):
            self.checkIsFrozen(name)
        object.__setattr__(self, name, value)

    def _freeze(self) -> None:
        object.__setattr__(self, "_frozen", True)
        for value in self.__dict__.values():
            if isinstance(value, OptionsDict):
                value._freeze()

    def _unfreeze(self) -> None:
        object.__setattr__(self, "_frozen", False)
        for value in self.__dict__.values():
            if isinstance(value, OptionsDict):
                value._unfreeze()

    def checkIsFrozen(self, option: str | None = None) -> None:  # noqa: N802
        """Raise ``AttributeError`` when these options are frozen."""
        if self._frozen:
            raise AttributeError("Can't modify frozen Options")

    def set(self, **kwargs: Any) -> OptionsDict:
        """Change existing options; a value's type must match the current one's."""
        self.checkIsFrozen()
        for name, value in kwargs.items():
            assert self.exists(name), f"Invalid option {name}, valid options are {self._values}"
            current = self._values[name]
            assert current is None or isinstance(value, type(current)) or (
                type(current) is float and isinstance(value, int)), (
                f"Unexpected type {type(value).__name__} for option {name}: "
                f"expected {type(current).__name__}")
            self._values[name] = value
        return self

    def createOrSet(self, **kwargs: Any) -> OptionsDict:  # noqa: N802
        """Set options, creating the ones that do not exist yet."""
        self.checkIsFrozen()
        self._values.update(kwargs)
        return self

    def exists(self, option: str) -> bool:
        """Whether ``option`` is set."""
        return option in self._values

    def deleteIfExists(self, option: str) -> None:  # noqa: N802
        """Remove ``option`` if it is set."""
        self.checkIsFrozen()
        self._values.pop(option, None)

    def update(self, other: dict[str, Any]) -> None:
        """Set every ``{option: value}`` of ``other`` (created if missing)."""
        self.createOrSet(**other)

    def toDict(self) -> dict[str, Any]:  # noqa: N802
        """A plain dict of the options (sub-objects as nested dicts)."""
        out = {k: v.toDict() if isinstance(v, OptionsDict) else v
               for k, v in self._values.items()}
        for k, v in self.__dict__.items():
            if isinstance(v, OptionsDict):
                out[k.lstrip("_")] = v.toDict()
        return out

    def _set(self, name: str, value: Any) -> Any:
        self.set(**{name: value})
        return self


class Attribute:
    """Keyword attributes attached to an op (``MultiConv`` settings, custom op attributes)."""

    def __init__(self, **kwargs: Any) -> None:
        self._values = dict(kwargs)

    def __enter__(self) -> Attribute:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


class _JitOptions(OptionsDict):
    """``opts.Jit``: PopTorch's tracing switch (capture always goes through torch's dispatcher)."""

    def __init__(self) -> None:
        super().__init__(trace_model=True)

    def traceModel(self, trace_model: bool) -> _JitOptions:  # noqa: N802
        """Trace with torch.jit (recorded; capture uses torch's dispatcher)."""
        return self._set("trace_model", trace_model)


class _PrecisionOptions(OptionsDict):
    """``opts.Precision``: float16 behaviour of the converted ops."""

    def __init__(self) -> None:
        super().__init__(half_float_casting=HalfFloatCastingBehavior.Default,
                         running_statistics_always_float=True, floating_point_exceptions=False,
                         stochastic_rounding=False, partials_type=torch.float32)

    def halfFloatCasting(self, half_float_casting: HalfFloatCastingBehavior,  # noqa: N802
                         ) -> _PrecisionOptions:
        """How an op with float16 and float32 operands computes: ``HalfUpcastToFloat`` (and
        ``Default``) in float32, torch's rule; ``FloatDowncastToHalf`` in float16, with a
        float16 result (explicit casts such as ``x.float()`` are kept)."""
        return self._set("half_float_casting", HalfFloatCastingBehavior(half_float_casting))

    def runningStatisticsAlwaysFloat(self, value: bool) -> _PrecisionOptions:  # noqa: N802
        """Keep BatchNorm running statistics in float32 (recorded)."""
        return self._set("running_statistics_always_float", value)

    def enableFloatingPointExceptions(self, enabled: bool) -> _PrecisionOptions:  # noqa: N802
        """Raise on NaN/inf results (the Session's floating-point checks)."""
        return self._set("floating_point_exceptions", enabled)

    def enableStochasticRounding(self, enabled: bool) -> _PrecisionOptions:  # noqa: N802
        return self._set("stochastic_rounding", enabled)

    def setPartialsType(self, dtype: torch.dtype) -> _PrecisionOptions:  # noqa: N802
        """``torch.float`` or ``torch.half``; anything else raises ValueError."""
        if dtype not in (torch.float, torch.half):
            raise ValueError(f"setPartialsType: expected torch.float or torch.half, got {dtype}")
        self.checkIsFrozen()
        self._values["partials_type"] = dtype
        return self


class _TrainingOptions(OptionsDict):
    """``opts.Training``: gradient accumulation and how accumulated gradients are reduced."""

    def __init__(self) -> None:
        super().__init__(gradient_accumulation=1,
                         accumulation_and_replication_reduction_type=ReductionType.Mean,
                         mean_accumulation_and_replication_reduction_strategy=(
                             MeanReductionStrategy.Post),
                         automatic_loss_scaling=False, convolution_dithering=False)

    def gradientAccumulation(self, gradient_accumulation: int) -> _TrainingOptions:  # noqa: N802
        """Micro-batches per weight update (a whole number >= 1)."""
        return self._set("gradient_accumulation", whole(
            "Training.gradientAccumulation", "gradient_accumulation", gradient_accumulation))

    def accumulationAndReplicationReductionType(self, reduction_type: ReductionType,  # noqa: N802
                                                ) -> _TrainingOptions:
        """``Mean`` (default) divides the summed gradient by accumulation x replicas."""
        if reduction_type == ReductionType.NoReduction:
            raise ValueError("NoReduction is not a valid accumulation and replication reduction")
        return self._set("accumulation_and_replication_reduction_type",
                         ReductionType(reduction_type))

    def setMeanAccumulationAndReplicationReductionStrategy(  # noqa: N802
            self, mean_reduction_strategy: MeanReductionStrategy) -> _TrainingOptions:
        """``Post`` divides the sum once; ``Running`` keeps a running mean per micro-batch."""
        return self._set("mean_accumulation_and_replication_reduction_strategy",
                         MeanReductionStrategy(mean_reduction_strategy))

    def setAutomaticLossScaling(self, enabled: bool) -> _TrainingOptions:  # noqa: N802
        """Adjust the loss scale automatically (recorded)."""
        return self._set("automatic_loss_scaling", enabled)

    def setConvolutionDithering(self, enabled: bool) -> _TrainingOptions:  # noqa: N802
        """Dither convolution tile allocation (recorded)."""
        return self._set("convolution_dithering", enabled)


class _PopartOptions(OptionsDict):
    """``opts._Popart``: PopART session options, recorded (xlgraph has no PopART)."""

    def __init__(self) -> None:
        super().__init__()
        object.__setattr__(self, "engine_options", {})
        object.__setattr__(self, "patterns", {})

    def set(self, key: str, value: Any) -> _PopartOptions:  # type: ignore[override]
        """Record a PopART option (``opts._Popart.set("saveInitializersToFile", "x.onnx")``)."""
        self.checkIsFrozen()
        self._values[key] = value
        return self

    def setEngineOptions(self, engine_options: dict[str, str]) -> _PopartOptions:  # noqa: N802
        self.checkIsFrozen()
        self.engine_options.update(engine_options)
        return self

    def setPatterns(self, patterns: dict[str, bool], level: int = 2,  # noqa: N802
                    ) -> _PopartOptions:
        level = whole("_Popart.setPatterns", "level", level, 0, 3)  # PopART's PatternsLevel
        self.checkIsFrozen()
        self.patterns.update(patterns)
        self._values["patterns_level"] = level
        return self


class _DistributedOptions(OptionsDict):
    """``opts.Distributed``: this process's rank among ``numProcesses`` (xlgraph-run/MPI)."""

    def __init__(self) -> None:
        super().__init__(var_process_id="OMPI_COMM_WORLD_RANK",
                         var_num_processes="OMPI_COMM_WORLD_SIZE", process_id=None,
                         num_processes=None)

    def disable(self) -> _DistributedOptions:
        """One process, whatever the environment says."""
        return self.configureProcessId(0, 1)

    def setEnvVarNames(self, var_num_processes: str, var_process_id: str,  # noqa: N802
                       ) -> _DistributedOptions:
        """Read the process count and id from these environment variables."""
        self.checkIsFrozen()
        self._values.update(var_num_processes=var_num_processes, var_process_id=var_process_id)
        return self

    def configureProcessId(self, process_id: int, num_processes: int,  # noqa: N802
                           ) -> _DistributedOptions:
        """Set this process's id and the process count explicitly."""
        setter = "Distributed.configureProcessId"
        num_processes = whole(setter, "num_processes", num_processes)
        process_id = whole(setter, "process_id", process_id, 0, num_processes - 1)
        self.checkIsFrozen()
        self._values.update(process_id=process_id, num_processes=num_processes)
        return self

    @property
    def processId(self) -> int:  # noqa: N802
        """This process's id (the environment's, unless configured)."""
        value = self._values["process_id"]
        return int(os.environ.get(self._values["var_process_id"], 0)) if value is None else value

    @property
    def numProcesses(self) -> int:  # noqa: N802
        """How many processes run the program (the environment's, unless configured)."""
        value = self._values["num_processes"]
        return int(os.environ.get(self._values["var_num_processes"], 1)) if value is None \
            else value


class TensorLocationSettings(OptionsDict):
    """Where a class of tensors lives (recorded: the simulator keeps every tensor on chip)."""

    def __init__(self) -> None:
        super().__init__(on_chip=True, replicated_tensor_sharding=False,
                         min_elements_for_off_chip=0, min_elements_for_rts=0,
                         io_tiles_to_load=False, io_tiles_to_store=False)

    def minElementsForOffChip(self, min_elements: int) -> TensorLocationSettings:  # noqa: N802
        """Smallest tensor kept off chip (recorded)."""
        return self._set("min_elements_for_off_chip", whole(
            "TensorLocationSettings.minElementsForOffChip", "min_elements", min_elements, 0,
            2**63 - 1))

    def minElementsForReplicatedTensorSharding(  # noqa: N802
            self, min_elements: int) -> TensorLocationSettings:
        """Smallest tensor sharded over replicas (recorded)."""
        return self._set("min_elements_for_rts", whole(
            "TensorLocationSettings.minElementsForReplicatedTensorSharding", "min_elements",
            min_elements, 0, 2**63 - 1))

    def useOnChipStorage(self, use: bool = True) -> TensorLocationSettings:  # noqa: N802
        """Keep these tensors on chip (recorded; always on chip here)."""
        return self._set("on_chip", use)

    def useReplicatedTensorSharding(self, use: bool = True,  # noqa: N802
                                    ) -> TensorLocationSettings:
        """Shard these tensors over replicas (recorded)."""
        return self._set("replicated_tensor_sharding", use)

    def useIOTilesToLoad(self, use: bool = True) -> TensorLocationSettings:  # noqa: N802
        """Load these tensors through IO tiles (recorded)."""
        return self._set("io_tiles_to_load", use)

    def useIOTilesToStore(self, use: bool = True) -> TensorLocationSettings:  # noqa: N802
        """Store these tensors through IO tiles (recorded)."""
        return self._set("io_tiles_to_store", use)


class _TensorLocationOptions(OptionsDict):
    """``opts.TensorLocations``: IO tiles (modelled) and tensor locations (recorded)."""

    def __init__(self) -> None:
        super().__init__(num_io_tiles=0, activation=None, weight=None, optimizer=None,
                         accumulator=None)

    def numIOTiles(self, num_tiles: int) -> _TensorLocationOptions:  # noqa: N802
        """Tiles reserved for IO (the ipu_model spreads compute over the others)."""
        num_tiles = whole("TensorLocations.numIOTiles", "num_tiles", num_tiles, 0, 192)
        if num_tiles and not 32 <= num_tiles <= 192 or num_tiles % 2:
            raise OptionValueError(f"TensorLocations.numIOTiles: num_tiles must be 0 or an "
                                   f"even number in [32, 192], got {num_tiles}")
        return self._set("num_io_tiles", num_tiles)

    def _location(self, key: str, location: TensorLocationSettings) -> _TensorLocationOptions:
        if not isinstance(location, TensorLocationSettings):
            raise TypeError(f"expected a poptorch.TensorLocationSettings, got "
                            f"{type(location).__name__}")
        self.checkIsFrozen()
        self._values[key] = location
        return self

    def setActivationLocation(self, location: TensorLocationSettings,  # noqa: N802
                              ) -> _TensorLocationOptions:
        return self._location("activation", location)

    def setWeightLocation(self, location: TensorLocationSettings,  # noqa: N802
                          ) -> _TensorLocationOptions:
        return self._location("weight", location)

    def setOptimizerLocation(self, location: TensorLocationSettings,  # noqa: N802
                             ) -> _TensorLocationOptions:
        return self._location("optimizer", location)

    def setAccumulatorLocation(self, location: TensorLocationSettings,  # noqa: N802
                               ) -> _TensorLocationOptions:
        return self._location("accumulator", location)


# -- execution strategies ------------------------------------------------------------------------
class Stage:
    """Blocks (by ``user_id``) that run together as one pipeline stage, on one IPU."""

    def __init__(self, *block_ids: str) -> None:
        self._blocks = [str(b) for b in block_ids]
        self._ipu: int | None = None

    @property
    def blocks(self) -> list[str]:
        """The block ids of this stage."""
        return list(self._blocks)

    def ipu(self, ipu: int) -> Stage:
        """Place this stage on IPU ``ipu``."""
        self._ipu = whole("Stage.ipu", "ipu", ipu, 0)
        return self


class Phase:
    """Stages that run in one execution phase."""

    def __init__(self, *arg: Any) -> None:
        self.stages = [a if isinstance(a, Stage) else Stage(*_ids(a)) for a in arg]

    def stage(self, idx: int) -> Stage:
        """The ``idx``-th stage of this phase."""
        return self.stages[idx]

    def ipus(self, *ipus: int) -> Phase:
        """Place this phase's stages on these IPUs, in order."""
        if len(ipus) > len(self.stages):
            raise OptionValueError(f"Phase.ipus: {len(ipus)} IPUs for {len(self.stages)} stages")
        for stage, ipu in zip(self.stages, ipus):
            stage.ipu(whole("Phase.ipus", "ipus", ipu, 0))
        return self


def _ids(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]


class _IExecutionStrategy:
    """Stages (or phases) and the IPUs they use."""

    def __init__(self, stages: list[Stage]) -> None:
        self.stages = stages

    def stage(self, block_id: str) -> Stage:
        """The ``Stage`` that block ``block_id`` belongs to (``strategy.stage("1").ipu(1)``);
        a block no stage names gets a stage of its own, as automatic staging gives it."""
        block_id = str(block_id)
        for stage in self.stages:
            if block_id in stage._blocks:
                return stage
        stage = Stage(block_id)
        self.stages.append(stage)
        return stage

    def num_ipus(self, blocks: dict[str, int | None]) -> int:
        """The IPUs the recorded blocks span (each block's ``ipu_id``, else its stage's IPU)."""
        ipus = {s._ipu for s in self.stages if s._ipu is not None}
        ipus |= {i for i in blocks.values() if i is not None}
        return max(ipus) + 1 if ipus else 1

    def backendOptions(self) -> dict[str, Any]:  # noqa: N802
        """The strategy as a dict (its type and stages)."""
        return {"execution_mode": type(self).__name__, "stages": [s.blocks for s in self.stages]}


class PipelinedExecution(_IExecutionStrategy):
    """Pipelined stages (``PipelinedExecution("A", "B")`` or stages); ``AutoStage`` without."""

    def __init__(self, *args: Any) -> None:
        self.auto_stage = AutoStage.SameAsIpu
        stages = []
        for a in args:
            if isinstance(a, AutoStage):
                self.auto_stage = a
            else:
                stages.append(a if isinstance(a, Stage) else Stage(*_ids(a)))
        super().__init__(stages)


class ShardedExecution(PipelinedExecution):
    """Stages run one after the other on their IPUs (model parallel without pipelining)."""


class _IPhasedExecution(_IExecutionStrategy):
    def __init__(self, *phases: Any) -> None:
        self.phases = [p if isinstance(p, Phase) else Phase(*(_ids(p))) for p in phases]
        super().__init__([s for p in self.phases for s in p.stages])


class ParallelPhasedExecution(_IPhasedExecution):
    """Phases alternate between two sets of IPUs."""

    def sendTensorsOffChipAfterFwd(self, off_chip: bool = True,  # noqa: N802
                                   ) -> ParallelPhasedExecution:
        """Move tensors off chip after the forward phase (recorded)."""
        self.off_chip_after_fwd = off_chip
        return self


class SerialPhasedExecution(_IPhasedExecution):
    """Phases run one after the other on the same IPUs."""

    def setTensorsLiveness(self, liveness: Liveness) -> SerialPhasedExecution:  # noqa: N802
        """Where tensors live between phases (recorded)."""
        self.liveness = Liveness(liveness)
        return self


class IStageManager:
    """Hands out stage ids to blocks (PopTorch's interface, for custom strategies)."""

    def __init__(self) -> None:
        self._next = 0
        self._stages: dict[str, Stage] = {}

    def clearDebug(self) -> None:  # noqa: N802
        """Nothing to clear: the simulator keeps no stage debug log."""

    def printDebug(self) -> None:  # noqa: N802
        print({k: s.blocks for k, s in self._stages.items()})

    def nextAutoId(self) -> str:  # noqa: N802
        self._next += 1
        return str(self._next - 1)

    def getStage(self, block_id: str) -> Stage:  # noqa: N802
        return self._stages[block_id]

    def beginStage(self, user_id: str, ipu_id_from_block: int | None) -> Stage:  # noqa: N802
        stage = self._stages.setdefault(user_id, Stage(user_id))
        if ipu_id_from_block is not None:
            stage.ipu(ipu_id_from_block)
        return stage

    def resetAutoId(self) -> None:  # noqa: N802
        self._next = 0


class ProgressBar:
    """The "Graph compilation" bar's settings; ``Options.showCompilationProgressBar`` toggles it."""

    def __init__(self) -> None:
        self.enabled = True


# -- Options -------------------------------------------------------------------------------------
_DEFAULTS: dict[str, Any] = {
    "device_iterations": 1, "replication_factor": 1, "input_group_size": 1,
    "input_group_type": CommGroupType.Consecutive, "output_mode": OutputMode.Default,
    "output_return_period": 1, "random_seed": None, "use_ipu_model": False,
    "executable_cache_dir": None, "show_compilation_progress_bar": True, "log_dir": ".",
    "max_repeat_logs": 4, "model_name": None, "auto_round_num_ipus": False,
    "connection_type": ConnectionType.Always, "sync_pattern": SyncPattern.Full,
    "ipu_id": None, "offline_ipu_version": None, "available_memory_proportion": None,
    "execution_strategy": None, "broadcast_buffers": True, "stable_norm": False,
    "synthetic_data": False, "log_cycle_count": False, "profile_dir": None,
    "module_namescope": True, "updatable_named_buffers": [], "source_location_excludes": [],
    "relax_optimizer_attributes_checks": False,
}


class Options(OptionsDict):
    """PopTorch's options. Setters chain (they return the object) and read back as snake_case.

    Example:
        >>> opts = Options().deviceIterations(50).randomSeed(42)
        >>> opts.Training.gradientAccumulation(4)
        >>> opts.device_iterations, opts.Training.gradient_accumulation
        (50, 4)
    """

    def __init__(self) -> None:
        super().__init__(**copy.deepcopy(_DEFAULTS))
        self._jit = _JitOptions()
        self._precision = _PrecisionOptions()
        self._training = _TrainingOptions()
        self._popart = _PopartOptions()
        self._distributed = _DistributedOptions()
        self._tensor_locations = _TensorLocationOptions()
        self.anchored_tensors: dict[str, tuple[str, OutputMode | None, int]] = {}
        if os.environ.get("POPTORCH_CACHE_DIR"):
            self.enableExecutableCaching(os.environ["POPTORCH_CACHE_DIR"])

    # -- sub-objects ---------------------------------------------------------------------------
    @property
    def Jit(self) -> _JitOptions:  # noqa: N802
        """``opts.Jit``: tracing options."""
        return self._jit

    @property
    def Precision(self) -> _PrecisionOptions:  # noqa: N802
        """``opts.Precision``: float16 behaviour."""
        return self._precision

    @property
    def Training(self) -> _TrainingOptions:  # noqa: N802
        """``opts.Training``: gradient accumulation and reduction."""
        return self._training

    @property
    def Distributed(self) -> _DistributedOptions:  # noqa: N802
        """``opts.Distributed``: process id and count."""
        return self._distributed

    @property
    def TensorLocations(self) -> _TensorLocationOptions:  # noqa: N802
        """``opts.TensorLocations``: IO tiles and tensor locations."""
        return self._tensor_locations

    @property
    def _Popart(self) -> _PopartOptions:  # noqa: N802
        return self._popart

    # -- freezing ------------------------------------------------------------------------------
    def freeze(self) -> None:
        """Refuse further changes (done by the wrappers and the DataLoader)."""
        self._freeze()

    def clone(self) -> Options:
        """An unfrozen deep copy."""
        other = copy.deepcopy(self)
        other._unfreeze()
        return other

    # -- batching ------------------------------------------------------------------------------
    def deviceIterations(self, device_iterations: int) -> Options:  # noqa: N802
        """Training or inference steps per call (``ir.num_host_transfers``, >= 1)."""
        return self._set("device_iterations", whole(
            "Options.deviceIterations", "device_iterations", device_iterations))

    def replicationFactor(self, replication_factor: int) -> Options:  # noqa: N802
        """Number of data-parallel model replicas (``Ir(replication=r)``, >= 1)."""
        return self._set("replication_factor", whole(
            "Options.replicationFactor", "replication_factor", replication_factor))

    def inputReplicaGrouping(self, input_group_size: int,  # noqa: N802
                             input_group_type: CommGroupType) -> Options:
        """Replicas in one group read the same input (``Consecutive`` or ``Orthogonal``)."""
        kind = CommGroupType(input_group_type)
        if kind not in (CommGroupType.Consecutive, CommGroupType.Orthogonal,
                        CommGroupType.NoGrouping, CommGroupType.All):
            raise ValueError(f"inputReplicaGrouping: unknown group type {input_group_type}")
        self._set("input_group_size", whole("Options.inputReplicaGrouping", "input_group_size",
                                            input_group_size))
        return self._set("input_group_type", kind)

    def outputMode(self, output_mode: OutputMode,  # noqa: N802
                   output_return_period: int | None = None) -> Options:
        """Which steps' outputs a call returns (``OutputMode``; ``EveryN`` needs a period)."""
        mode = OutputMode(output_mode)
        if mode == OutputMode.EveryN:
            output_return_period = whole("Options.outputMode(OutputMode.EveryN)",
                                         "output_return_period", output_return_period)
        elif output_return_period is not None and whole(
                "Options.outputMode", "output_return_period", output_return_period) != 1:
            raise OptionValueError(f"Options.outputMode: output_return_period is only used "
                                   f"with EveryN, not {mode.name}; got {output_return_period}")
        self._set("output_mode", mode)
        return self._set("output_return_period", output_return_period or 1)

    def anchorMode(self, anchor_mode: OutputMode,  # noqa: N802
                   anchor_return_period: int | None = None) -> Options:
        """The pre-2.5 name of ``outputMode``."""
        return self.outputMode(anchor_mode, anchor_return_period)

    def defaultOutputMode(self) -> bool:  # noqa: N802
        """Whether the output mode is still ``Default``."""
        return self.output_mode == OutputMode.Default

    def anchorTensor(self, short_name: str, long_name: str,  # noqa: N802
                     output_mode: OutputMode | None = None, output_return_period: int = 1,
                     ) -> Options:
        """Return the tensor named ``long_name`` from each call, read by
        ``getAnchoredTensor(short_name)``; names are ``getTensorNames()`` entries."""
        output_return_period = whole("Options.anchorTensor", "output_return_period",
                                     output_return_period)
        self.checkIsFrozen()
        if output_mode is not None:
            output_mode = OutputMode(output_mode)
        self.anchored_tensors[short_name] = (long_name, output_mode, output_return_period)
        return self

    def resolved_output_mode(self, training: bool) -> OutputMode:
        """``Default`` is ``Final`` in training and ``All`` in inference."""
        if self.output_mode == OutputMode.Default:
            return OutputMode.Final if training else OutputMode.All
        return self.output_mode

    # -- device --------------------------------------------------------------------------------
    def randomSeed(self, random_seed: int) -> Options:  # noqa: N802
        """Seed of the device's random ops (and of ``torch.manual_seed``): a whole number in
        [0, 2**64 - 1], PopTorch's 64-bit unsigned seed."""
        random_seed = whole("Options.randomSeed", "random_seed", random_seed, 0, 2**64 - 1)
        self.checkIsFrozen()
        self._values["random_seed"] = random_seed
        torch.manual_seed(random_seed)
        return self

    def useIpuModel(self, use_model: bool) -> Options:  # noqa: N802
        """Run on the ipu_model (a whole chip: 1,472 tiles; 4 with POPTORCH_SMALL_IPU_MODEL)."""
        return self._set("use_ipu_model", use_model)

    def enableProfiling(self, profile_dir: str | None = None) -> Options:  # noqa: N802
        """Run on the ipu_model and write its report to ``profile_dir``/profile.json when the
        model compiles and at ``detachFromDevice`` (``xlgraph-report`` renders it)."""
        self.checkIsFrozen()
        self._values["profile_dir"] = profile_dir or os.environ.get("POPLAR_ENGINE_OPTIONS_DIR",
                                                                    ".")
        return self

    def logCycleCount(self, log_cycle_count: bool) -> Options:  # noqa: N802
        """Model cycles on the ipu_model so ``cycleCount()`` can read them."""
        return self._set("log_cycle_count", log_cycle_count)

    def enableSyntheticData(self, enabled: bool) -> Options:  # noqa: N802
        """Feed zeros instead of the call's inputs (measures the device without host IO)."""
        return self._set("synthetic_data", enabled)

    def setExecutionStrategy(self, strategy: _IExecutionStrategy) -> Options:  # noqa: N802
        """Pipelined, sharded or phased execution (recorded; the ipu_model counts its IPUs)."""
        if not isinstance(strategy, _IExecutionStrategy):
            raise TypeError(f"setExecutionStrategy: expected PipelinedExecution, "
                            f"ShardedExecution or a phased execution, got {strategy!r}")
        self.checkIsFrozen()
        self._values["execution_strategy"] = strategy
        return self

    def setAvailableMemoryProportion(self, available_memory_proportion: dict[str, float],  # noqa: N802
                                     ) -> Options:
        """``{"IPU0": 0.3, ...}``: memory kept for convolution and matmul temporaries."""
        for key, value in available_memory_proportion.items():
            if not key.startswith("IPU") or not 0.0 < float(value) <= 1.0:
                raise ValueError(f"setAvailableMemoryProportion: expected {{'IPU<n>': value in "
                                 f"(0, 1]}}, got {key!r}: {value!r}")
        self.checkIsFrozen()
        self._values["available_memory_proportion"] = dict(available_memory_proportion)
        return self

    def enableExecutableCaching(self, path: str | None) -> Options:  # noqa: N802
        """Recorded; the simulator compiles in seconds and caches nothing."""
        self.checkIsFrozen()
        self._values["executable_cache_dir"] = path
        return self

    def showCompilationProgressBar(self, show: bool = True) -> Options:  # noqa: N802
        """Show the "Graph compilation" bar (only on a terminal; XLGRAPH_PROGRESS=0 hides it)."""
        return self._set("show_compilation_progress_bar", show)

    def updatableNamedBuffers(self, buffers: list[str]) -> Options:  # noqa: N802
        """Buffers ``copyNamedBuffersToDevice()`` re-uploads."""
        self.checkIsFrozen()
        self._values["updatable_named_buffers"] = list(buffers)
        return self

    # -- recorded hardware and logging settings ------------------------------------------------
    def autoRoundNumIPUs(self, auto_round_num_ipus: bool = True) -> Options:  # noqa: N802
        """Round the IPU count up to a power of two (recorded; no hardware)."""
        return self._set("auto_round_num_ipus", auto_round_num_ipus)

    def connectionType(self, connection_type: ConnectionType) -> Options:  # noqa: N802
        """When to attach to hardware (recorded; no hardware)."""
        return self._set("connection_type", ConnectionType(connection_type))

    def syncPattern(self, sync_pattern: SyncPattern) -> Options:  # noqa: N802
        """How IPUs synchronise (recorded; no hardware)."""
        return self._set("sync_pattern", SyncPattern(sync_pattern))

    def useIpuId(self, ipu_id: int) -> Options:  # noqa: N802
        """Which hardware IPU to use (recorded; no hardware)."""
        self.checkIsFrozen()
        self._values["ipu_id"] = whole("Options.useIpuId", "ipu_id", ipu_id, 0)
        return self

    def useOfflineIpuTarget(self, ipu_version: int = 2) -> Options:  # noqa: N802
        """Compile for IPU version 2 or 21 without a device (the ipu_model's version)."""
        version = whole("Options.useOfflineIpuTarget", "ipu_version", ipu_version, 2, 21)
        if version not in (2, 21):
            raise OptionValueError(f"Options.useOfflineIpuTarget: ipu_version must be 2 or 21, "
                                   f"got {version}")
        self.checkIsFrozen()
        self._values["offline_ipu_version"] = version
        return self

    def broadcastBuffers(self, broadcast_buffers: bool = True) -> Options:  # noqa: N802
        """Broadcast buffers from replica 0 (recorded; replicas start equal)."""
        return self._set("broadcast_buffers", broadcast_buffers)

    def enableStableNorm(self, enabled: bool) -> Options:  # noqa: N802
        """Use the stable norm form (recorded; always stable here)."""
        return self._set("stable_norm", enabled)

    def disableModuleNamescope(self) -> Options:  # noqa: N802
        """Do not prefix op names with module scopes (recorded)."""
        return self._set("module_namescope", False)

    def logDir(self, log_dir: str) -> Options:  # noqa: N802
        """Where PopTorch writes logs (recorded; xlgraph does not log)."""
        return self._set("log_dir", log_dir)

    def maxRepeatLogs(self, max_lines: int) -> Options:  # noqa: N802
        """Log repetition limit (recorded; xlgraph does not log)."""
        return self._set("max_repeat_logs", whole("Options.maxRepeatLogs", "max_lines",
                                                  max_lines, 0))

    def modelName(self, name: str) -> Options:  # noqa: N802
        """The model's name in logs (recorded)."""
        self.checkIsFrozen()
        self._values["model_name"] = name
        return self

    def sourceLocationExcludes(self, excludes: list[str]) -> Options:  # noqa: N802
        """Paths skipped when locating the user's line (recorded)."""
        self.checkIsFrozen()
        self._values["source_location_excludes"] = list(excludes)
        return self

    def appendToLocationExcludes(self, *excludes: str) -> Options:  # noqa: N802
        """Add paths skipped when locating the user's line (recorded)."""
        self.checkIsFrozen()
        self._values["source_location_excludes"] += list(excludes)
        return self

    def relaxOptimizerAttributesChecks(self, relax: bool = True) -> Options:  # noqa: N802
        """Allow unknown optimiser attributes (recorded)."""
        return self._set("relax_optimizer_attributes_checks", relax)

    # -- files ---------------------------------------------------------------------------------
    def from_json(self, string: str) -> Options:
        """Apply ``{"setter": value}`` pairs (``"Training.gradientAccumulation": 4`` allowed)."""
        try:
            settings = json.loads(string)
        except json.JSONDecodeError as exc:
            raise ConfigFileError(f"Options.from_json: not JSON ({exc})") from None
        for key, value in settings.items():
            self._apply(key, value)
        return self

    def loadFromFile(self, filepath: str) -> Options:  # noqa: N802
        """Apply a file of setter calls, one per line, as a program would make them
        (``deviceIterations(4)``, ``Training.gradientAccumulation(2)``,
        ``setExecutionStrategy(poptorch.ShardedExecution())``), or ``setter value`` lines.
        The file is read as data (``xlgraph.poptorch.options_file``), never run.

        Raises:
            ConfigFileError: a line that is not a setter call with accepted values, or that
                its setter refuses (naming the file, line and reason).
        """
        with open(filepath, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                line = line.split("#", 1)[0].strip()
                if not line:
                    continue
                try:
                    self._apply_line(line)
                except (AttributeError, TypeError, ValueError, AssertionError,
                        ConfigFileError) as exc:
                    raise ConfigFileError(f"{filepath}:{number}: {line}: {exc}") from None
        return self

    def _apply_line(self, line: str) -> None:
        try:
            setter, args, kwargs = parse_call(line, _file_names())
        except ValueError:
            if "(" in line:
                raise
            name, _, rest = line.partition(" ")  # ``setter value``
            try:
                value = json.loads(rest.strip().replace("'", '"')) if rest.strip() else True
            except json.JSONDecodeError:
                value = rest.strip()
            self._apply(name, value)
            return
        self._method(setter)(*args, **kwargs)

    def _apply(self, key: str, value: Any) -> None:
        method = self._method(key)
        method(*value) if isinstance(value, list) else method(value)

    def _method(self, key: str) -> Any:
        """The setter ``key`` names (``Training.gradientAccumulation``)."""
        owner: Any = self
        *path, setter = key.split(".")
        for part in path:
            if part.startswith("_") and part != "_Popart":
                raise ConfigFileError(f"unknown option setter {key!r} (see {SUPPORT_PAGE})")
            owner = getattr(owner, part)
        method = getattr(owner, setter, None)
        if not callable(method) or setter.startswith("_"):
            raise ConfigFileError(f"unknown option setter {key!r} (see {SUPPORT_PAGE})")
        return method

    def toDict(self) -> dict[str, Any]:  # noqa: N802
        """Every option as a plain dict (sub-objects nested under their names)."""
        out = super().toDict()
        out.update(Jit=out.pop("jit"), Precision=out.pop("precision"),
                   Training=out.pop("training"), Popart=out.pop("popart"),
                   Distributed=out.pop("distributed"),
                   TensorLocations=out.pop("tensor_locations"))
        return out

    def __repr__(self) -> str:
        """``Options(option=value, ..., Training=_TrainingOptions(...), ...)``: every option
        and sub-object, as PopTorch prints them."""
        subs = {k: v for k, v in self.toDict().items() if isinstance(v, dict)}
        parts = [f"{k}={v!r}" for k, v in self._values.items()]
        for name in subs:
            obj = getattr(self, name, None) if name != "Popart" else self._Popart
            parts.append(f"{name}={obj!r}")
        return f"{type(self).__name__}(" + ", ".join(parts) + ")"


def _file_names() -> dict[str, Any]:
    """What ``poptorch.<name>`` may name in an options file: the enums, the execution
    strategies and their stages, and tensor location settings."""
    names: dict[str, Any] = {k: v for k, v in vars(enums).items()
                             if isinstance(v, type) and issubclass(v, enum.Enum)}
    names.update({c.__name__: c for c in (
        Stage, Phase, PipelinedExecution, ShardedExecution, ParallelPhasedExecution,
        SerialPhasedExecution, TensorLocationSettings)})
    return names
