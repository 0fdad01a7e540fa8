"""``poptorch.Options`` and its enums, with PopTorch's setters, defaults and freezing."""

from __future__ import annotations

import copy
import enum
from typing import Any

import torch

__all__ = ["Options", "OutputMode", "AnchorMode", "ReductionType", "DataLoaderMode"]


class OutputMode(enum.IntEnum):
    """Which micro-batches' outputs a call returns (PopTorch's values)."""

    Final = 0
    EveryN = 1
    All = 2
    Sum = 3
    Default = 4


AnchorMode = OutputMode  # the pre-2.5 name, used by the MNIST demo


class ReductionType(enum.IntEnum):
    """How gradients of accumulated (and replicated) micro-batches are combined."""

    Sum = 0
    Mean = 1
    NoReduction = 2


class DataLoaderMode(enum.IntEnum):
    """How ``poptorch.DataLoader`` loads batches (PopTorch's values; loading is synchronous)."""

    Sync = 0
    Async = 1
    AsyncRebatched = 2


class _Frozen:
    """Setters refuse changes once the owning ``Options`` is frozen."""

    def __init__(self) -> None:
        self._frozen = False

    def _set(self, name: str, value: Any, default: Any) -> Any:
        if self._frozen:
            raise AttributeError("Can't modify frozen Options")
        assert isinstance(value, type(default)), (
            f"{name} must be of type {type(default).__name__}, got {type(value).__name__}")
        setattr(self, name, value)
        return self


class _Training(_Frozen):
    """``opts.Training``: gradient accumulation and its reduction."""

    def __init__(self) -> None:
        super().__init__()
        self.gradient_accumulation = 1
        self.accumulation_and_replication_reduction_type = ReductionType.Mean

    def gradientAccumulation(self, gradient_accumulation: int) -> _Training:  # noqa: N802
        return self._set("gradient_accumulation", gradient_accumulation, 1)

    def accumulationAndReplicationReductionType(self, reduction_type: Any) -> _Training:  # noqa: N802
        if reduction_type == ReductionType.NoReduction:
            raise ValueError("NoReduction is not a valid accumulation and replication reduction")
        return self._set("accumulation_and_replication_reduction_type",
                         ReductionType(reduction_type), ReductionType.Mean)

    def setAutomaticLossScaling(self, enabled: bool) -> _Training:  # noqa: N802
        return self._set("automatic_loss_scaling", enabled, False)


class _Precision(_Frozen):
    """``opts.Precision``: stored and ignored (the simulator computes in the graph's dtypes)."""

    def setPartialsType(self, dtype: Any) -> _Precision:  # noqa: N802
        if dtype not in (torch.float, torch.half):
            raise ValueError(f"setPartialsType: expected torch.float or torch.half, got {dtype}")
        self.partials_type = dtype
        return self

    def enableStochasticRounding(self, enabled: bool) -> _Precision:  # noqa: N802
        return self._set("stochastic_rounding", enabled, False)

    def enableFloatingPointExceptions(self, enabled: bool) -> _Precision:  # noqa: N802
        return self._set("floating_point_exceptions", enabled, False)


class Options(_Frozen):
    """PopTorch's options. Setters chain (they return the object) and read back as snake_case.

    Example:
        >>> opts = Options().deviceIterations(50).randomSeed(42)
        >>> opts.Training.gradientAccumulation(4)
        >>> opts.device_iterations, opts.Training.gradient_accumulation
        (50, 4)
    """

    def __init__(self) -> None:
        super().__init__()
        self.device_iterations = 1
        self.replication_factor = 1
        self.output_mode = OutputMode.Default
        self.output_return_period = 1
        self.random_seed: int | None = None
        self.use_ipu_model = False
        self.executable_cache_dir: str | None = None
        self.Training = _Training()
        self.Precision = _Precision()

    def freeze(self) -> None:
        """Refuse further changes (done by the wrappers and the DataLoader)."""
        self._frozen = self.Training._frozen = self.Precision._frozen = True

    def clone(self) -> Options:
        """An unfrozen deep copy."""
        other = copy.deepcopy(self)
        other._frozen = other.Training._frozen = other.Precision._frozen = False
        return other

    def deviceIterations(self, device_iterations: int) -> Options:  # noqa: N802
        """Training or inference steps per call (``ir.num_host_transfers``)."""
        return self._set("device_iterations", device_iterations, 1)

    def replicationFactor(self, replication_factor: int) -> Options:  # noqa: N802
        """Number of model replicas (``ir.replication_factor``)."""
        return self._set("replication_factor", replication_factor, 1)

    def randomSeed(self, random_seed: int) -> Options:  # noqa: N802
        """Seed of the device's random ops (and of ``torch.manual_seed``)."""
        self._set("random_seed", random_seed, 0)
        torch.manual_seed(random_seed)
        return self

    def useIpuModel(self, use_model: bool) -> Options:  # noqa: N802
        """Run on ``"ipu_model"`` rather than ``"cpu"`` (both simulate the device)."""
        return self._set("use_ipu_model", use_model, False)

    def outputMode(self, output_mode: Any, output_return_period: int | None = None,  # noqa: N802
                   ) -> Options:
        """Which steps' outputs a call returns (``OutputMode``; ``EveryN`` needs a period)."""
        mode = OutputMode(output_mode)
        if mode == OutputMode.EveryN:
            assert output_return_period is not None and output_return_period > 0, \
                "OutputMode.EveryN needs output_return_period > 0"
        elif output_return_period is not None:
            raise ValueError(f"output_return_period is only used with EveryN, not {mode.name}")
        self._set("output_mode", mode, OutputMode.Default)
        self.output_return_period = output_return_period or 1
        return self

    def anchorMode(self, anchor_mode: Any, anchor_return_period: int | None = None,  # noqa: N802
                   ) -> Options:
        """The pre-2.5 name of ``outputMode``."""
        return self.outputMode(anchor_mode, anchor_return_period)

    def enableExecutableCaching(self, path: str | None) -> Options:  # noqa: N802
        """Accepted; the simulator compiles in seconds and caches nothing."""
        self.executable_cache_dir = path
        return self

    def _ignored(self, *args: Any, **kwargs: Any) -> Options:
        """Accepted for compatibility; has no effect in xlgraph."""
        return self

    logDir = maxRepeatLogs = showCompilationProgressBar = modelName = _ignored  # noqa: N815
    enableProfiling = loadFromFile = _ignored  # noqa: N815

    def resolved_output_mode(self, training: bool) -> OutputMode:
        """``Default`` is ``Final`` in training and ``All`` in inference."""
        if self.output_mode == OutputMode.Default:
            return OutputMode.Final if training else OutputMode.All
        return self.output_mode

    def __repr__(self) -> str:
        return (f"Options(device_iterations={self.device_iterations}, replication_factor="
                f"{self.replication_factor}, gradient_accumulation="
                f"{self.Training.gradient_accumulation}, output_mode={self.output_mode.name}, "
                f"random_seed={self.random_seed})")
