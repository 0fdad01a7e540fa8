"""PopART session options, reached as PopXL programs do: ``ir._pb_ir.getSessionOptions()``.

Every documented option name is accepted and recorded with PopART's default; unknown names raise
``AttributeError`` with the closest known names. What the simulator honours:

- ``enableFloatingPointChecks`` (default False): a run raises ``ExecutionError`` at the first
  op producing an overflow, a division by zero or an invalid result (NaN), as the IPU traps.
- ``enableInplaceAmbiguityChecking`` (default True): False skips the check for unordered
  in-place ops, and reads unordered with an earlier in-place op, at Session creation (ops then
  run in creation order).

The rest only describe hardware behaviour (tiles, engine, memory placement, rounding): they are
honoured by the ipu_model (``numIOTiles`` reserves IO tiles), recorded for it
(``partialsTypeMatMuls``, ``convolutionOptions``, ``matmulOptions``) or accepted and ignored.
``docs/popxl-compat.md`` lists them.
"""

from __future__ import annotations

import difflib
import os
from types import SimpleNamespace
from typing import Any

from xlgraph.core.pb_views import PbIrGraphs

__all__ = ["SessionOptions", "PbIr", "HONOURED"]

HONOURED = ("enableFloatingPointChecks", "enableInplaceAmbiguityChecking")

# Flat options with PopART's defaults (PopART SessionOptions, SDK 3.3).
_DEFAULTS: dict[str, Any] = {
    "accumulationFactor": 1, "aliasZeroCopy": False, "autoRecomputation": 0,
    "cachePath": "session_cache", "compileEngine": True, "constantWeights": True,
    "decomposeGradSum": False, "defaultPrefetchBufferingDepth": 1, "delayVarUpdates": True,
    "disableGradAccumulationTensorStreams": False, "dotOpNames": False,
    "enableConvDithering": False,
    "enableDistributedReplicatedGraphs": False, "enableEngineCaching": False,
    "enableExplicitMainLoops": True, "enableFloatingPointChecks": False,
    "enableFullyConnectedPass": True, "enableGradientAccumulation": False,
    "enableInplaceAmbiguityChecking": True, "enableLoadAndOffloadRNGState": False,
    "enableMergeExchange": True, "enableNonStableSoftmax": False, "enableOutlining": True,
    "enableOutliningCopyCostPruning": True, "enablePipelining": False,
    "enablePrefetchDatastreams": True, "enableReplicatedGraphs": False,
    "enableSerializedMatmuls": True, "enableStableNorm": False,
    "enableStochasticRounding": False, "enableSupportedDataTypeCasting": True,
    "engineOptions": None, "explicitRecomputation": True, "exportPoplarComputationGraph": False,
    "exportPoplarVertexGraph": False, "finalDotOp": 10000, "firstDotOp": 0,
    "globalReplicaOffset": 0, "globalReplicationFactor": 1, "groupHostSync": False,
    "hardwareInstrumentations": None, "instrumentWithHardwareCycleCounter": False,
    "kahnTieBreaker": "greedy", "logDir": "", "gclOptions": None, "convolutionOptions": None,
    "lstmOptions": None, "matmulOptions": None, "reportOptions": None, "mergeVarUpdate": 0,
    "mergeVarUpdateMemThreshold": 1000000, "numIOTiles": 0, "opxAliasChecking": False,
    "opxModifyChecking": False, "outlineSequenceBreakCost": 10000.0, "outlineThreshold": 1.0,
    "partialsTypeMatMuls": "", "rearrangeAnchorsOnHost": True, "rearrangeStreamsOnHost": False,
    "replicatedGraphCount": 1, "separateCallOpPdfs": True, "serializedPoprithmsShiftGraphsDir": "",
    "stashAllTensorsInferencePipeline": False, "strictOpVersions": True,
    "subgraphCopyingStrategy": 0, "swapLimitScheduler": -1, "syntheticDataMode": 0,
    "throwIfLog2ScaleTensorNotInRange": True, "timeLimitScheduler": 1000000000.0,
    "transitiveClosureOptimizationThreshold": 100000, "useHostCopyOps": True,
    "virtualGraphMode": "Manual", "virtualGraphSplitRatios": None,
    "enableExplicitIR": True, "ensureFp32LossScaleTensor": False,
    "meanAccumulationAndReplicationReductionStrategy": "Post",
    "scheduleNonWeightUpdateGradientConsumersEarly": False, "updatableNamedBuffers": None,
    "bufferingDepthMap": None, "prefetchBufferingDepthMap": None, "customCodelets": None,
    "customCodeletCompileFlags": "", "compilationProgressTotal": 100,
}
_DICTS = ("engineOptions", "gclOptions", "convolutionOptions", "lstmOptions", "matmulOptions",
          "reportOptions", "bufferingDepthMap", "prefetchBufferingDepthMap")
_LISTS = ("dotChecks", "hardwareInstrumentations", "virtualGraphSplitRatios",
          "updatableNamedBuffers", "customCodelets")
# Nested settings records: PopART structs whose fields are set one by one.
_SETTINGS = {
    "executionPhaseSettings": {"phases": 0, "stages": 2, "weightIOSchedule": 0,
                               "activationIOSchedule": 0, "optimizerStateIOSchedule": 0,
                               "accumulatorIOSchedule": 0, "schedule": 0},
    "accumulateOuterFragmentSettings": {"schedule": 0, "excludedVirtualGraphs": []},
    "batchSerializationSettings": {"factor": 0, "concatOnVirtualGraphChange": True,
                                   "concatOnExecutionPhaseChange": True,
                                   "concatOnPipelineStageChange": True,
                                   "transformContext": 0, "method": 0, "batchSchedule": 0},
    "automaticLossScalingSettings": {"enabled": False, "binEdgeLocation": 0.5,
                                     "thresholdUpperCountProportion": 1e-7,
                                     "updatePeriod": 1, "gradientTensorTrackingMethod": 0},
    "autodiffSettings": {"stitchStrategy": 0},
    "replicatedCollectivesSettings": {"prepareScheduleForMergingCollectives": False,
                                      "mergeAllReduceCollectives": False,
                                      "mergeReduceScatterCollectives": False,
                                      "mergeAllGatherCollectives": False},
    "activationTensorLocationSettings": {"location": None, "minElementsForOffChip": 2,
                                         "minElementsForReplicatedTensorSharding": 8192},
    "weightTensorLocationSettings": {"location": None, "minElementsForOffChip": 2,
                                     "minElementsForReplicatedTensorSharding": 8192},
    "optimizerStateTensorLocationSettings": {"location": None, "minElementsForOffChip": 2,
                                             "minElementsForReplicatedTensorSharding": 8192},
    "accumulatorTensorLocationSettings": {"location": None, "minElementsForOffChip": 2,
                                          "minElementsForReplicatedTensorSharding": 8192},
    "tensorLocationSettingsOverride": {},
    "developerSettings": {"timePartitionLoggerThresholdPercentage": 1.0},
    "experimentalSettings": {"customTransformApplierSettings": {}},
}


class SessionOptions:
    """PopART's session options: documented names only, each recorded with its default.

    Setting an unknown name raises ``AttributeError`` naming the closest documented ones.
    ``changed`` holds the names a program set.
    """

    def __init__(self) -> None:
        values: dict[str, Any] = dict(_DEFAULTS)
        for name in _DICTS:
            values[name] = {}
        for name in _LISTS:
            values[name] = []
        for name, fields in _SETTINGS.items():
            values[name] = SimpleNamespace(**{k: _fresh(v) for k, v in fields.items()})
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_changed", set())

    @property
    def changed(self) -> set[str]:
        return self._changed

    def __getattr__(self, name: str) -> Any:
        values = object.__getattribute__(self, "_values")
        if name in values:
            return values[name]
        raise AttributeError(_unknown(name))

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self._values:
            raise AttributeError(_unknown(name))
        self._values[name] = value
        self._changed.add(name)

    def record(self, values: dict[str, Any]) -> None:
        """Set options on the Ir's behalf (its replication): not counted in ``changed``."""
        for name in values:
            if name not in self._values:
                raise AttributeError(_unknown(name))
        self._values.update(values)

    def __repr__(self) -> str:
        changed = ", ".join(f"{k}={self._values[k]!r}" for k in sorted(self._changed))
        return f"SessionOptions({changed})"


def _fresh(value: Any) -> Any:
    return type(value)(value) if isinstance(value, dict | list) else value


def _unknown(name: str) -> str:
    known = [*_DEFAULTS, *_DICTS, *_LISTS, *_SETTINGS]
    close = difflib.get_close_matches(name, known, n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return f"{name!r} is not a PopART session option{hint}"


class PbIr(PbIrGraphs):
    """The part of PopXL's internal ``ir._pb_ir`` that programs use: the session options, and
    read-only listings of the graphs and ops (``xlgraph.core.pb_views``)."""

    def __init__(self, ir: Any = None) -> None:
        self._ir = ir
        self._options = SessionOptions()
        cache = os.environ.get("POPXL_CACHE_DIR") or os.environ.get("POPART_CACHE_DIR")
        if cache:  # as PopXL's Ir: the executable cache on (nothing is cached here)
            self._options.record({"enableEngineCaching": True, "cachePath": cache})

    def getSessionOptions(self) -> SessionOptions:  # noqa: N802 - PopART's name
        """The Ir's session options, read when a Session is created."""
        return self._options

    def setPatterns(self, patterns: Any) -> None:  # noqa: N802
        """Record PopART's pattern set (``popart._internal.ir.patterns.Patterns``). No effect
        on the simulator: its identity-replaceable ops already lower as identities."""
        self._patterns = patterns

    def getPatterns(self) -> Any:  # noqa: N802
        """The pattern set given to ``setPatterns`` (None before)."""
        return getattr(self, "_patterns", None)

    def applyPreAliasPatterns(self, graph: Any) -> None:  # noqa: N802
        """Accepted with no effect (see ``setPatterns``)."""

    def applyInplacePattern(self, graph: Any) -> None:  # noqa: N802
        """Accepted with no effect: xlgraph's in-place ops are the ones the program made."""
