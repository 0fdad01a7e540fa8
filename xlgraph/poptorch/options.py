"""``poptorch.Options``, its sub-objects and the execution strategies, with PopTorch's setters.

Every setter returns the object it was called on, values read back as snake_case attributes
(``opts.device_iterations``), types are checked against the default's, and an ``Options`` given
to a wrapper or ``DataLoader`` is frozen. ``docs/poptorch-support.md`` says what each setter does
on the simulator (works, recorded for the ipu_model, or accepted and ignored).

The sub-objects live beside it, one module per group, and are re-exported here:
``options_dict.py`` (the base), ``options_numerics.py`` (Jit, Precision, Training),
``options_popart.py`` (Popart, Distributed), ``options_locations.py`` (TensorLocations) and
``options_strategies.py`` (execution strategies). Over 400 lines: ``Options`` is one class,
PopTorch's top-level setters, each a few lines.
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
    CommGroupType,
    ConnectionType,
    OutputMode,
    SyncPattern,
)
from xlgraph.poptorch.options_dict import (  # noqa: F401 - the old path re-exports them
    Attribute,
    ConfigFileError,
    OptionsDict,
)
from xlgraph.poptorch.options_file import parse_call
from xlgraph.poptorch.options_locations import (  # noqa: F401 - the old path re-exports them
    TensorLocationSettings,
    _TensorLocationOptions,
)
from xlgraph.poptorch.options_numerics import (  # noqa: F401 - the old path re-exports them
    _JitOptions,
    _PrecisionOptions,
    _TrainingOptions,
)
from xlgraph.poptorch.options_popart import (  # noqa: F401 - the old path re-exports them
    _DistributedOptions,
    _PopartOptions,
)
from xlgraph.poptorch.options_strategies import (  # noqa: F401 - the old path re-exports them
    IStageManager,
    ParallelPhasedExecution,
    Phase,
    PipelinedExecution,
    SerialPhasedExecution,
    ShardedExecution,
    Stage,
    _ids,
    _IExecutionStrategy,
    _IPhasedExecution,
)
from xlgraph.poptorch.support import SUPPORT_PAGE

__all__ = [
    "Attribute", "ConfigFileError", "OptionsDict", "Options", "TensorLocationSettings",
    "Stage", "Phase", "PipelinedExecution", "ShardedExecution", "ParallelPhasedExecution",
    "SerialPhasedExecution", "IStageManager", "ProgressBar",
]


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
        self.from_json(os.environ.get("POPTORCH_DEFAULT_OPTIONS", "{}"))

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
        """Which steps' outputs a call returns (``OutputMode``; ``EveryN`` needs a period,
        which other modes ignore, as PopTorch does)."""
        mode = OutputMode(output_mode)
        if mode == OutputMode.EveryN:
            output_return_period = whole("Options.outputMode(OutputMode.EveryN)",
                                         "output_return_period", output_return_period)
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
        """Apply ``{"setter": value}`` pairs (``"Training.gradientAccumulation": 4`` allowed; a
        list is the setter's arguments; ``"ConnectionType.OnDemand"`` is that enum member).
        ``Options()`` applies ``$POPTORCH_DEFAULT_OPTIONS`` this way, as PopTorch."""
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
        if isinstance(value, list):
            method(*[_enum_member(v) for v in value])
        else:
            method(_enum_member(value))

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


def _enum_member(value: Any) -> Any:
    """``"ConnectionType.OnDemand"`` as ``poptorch.enums.ConnectionType.OnDemand`` when that
    member exists, else ``value``."""
    if isinstance(value, str) and value.count(".") == 1:
        owner, name = value.split(".")
        kind = getattr(enums, owner, None)
        if isinstance(kind, type) and issubclass(kind, enum.Enum) and name in kind.__members__:
            return kind[name]
    return value

