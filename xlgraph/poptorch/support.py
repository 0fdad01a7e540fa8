"""What the PopTorch frontend does with each PopTorch name that does not simply work.

``STATUS`` maps a surface path (``Options.connectionType``, ``PoplarExecutor.save``) to its
status and why; every name not listed works as PopTorch documents it. The support page
(``docs/poptorch-support.md``) is generated from this table, the conversion table and the
surface JSON. ``refuse`` and ``unknown`` give the one-line errors that name the name and the page.
"""

from __future__ import annotations

import os
import sysconfig
from typing import NoReturn

from xlgraph.errors import XlgraphError

__all__ = ["Error", "RecoverableError", "UnrecoverableError", "SUPPORT_PAGE", "STATUS", "refuse",
           "unknown", "status"]

SUPPORT_PAGE = "docs/poptorch-support.md"

RECORDED = "recorded"  # accepted; its meaning is recorded (and fed to the ipu_model)
IGNORED = "ignored"  # accepted with no effect on the simulator
REFUSED = "refused"  # raises poptorch.Error naming it and this page


class Error(XlgraphError, RuntimeError):
    """``poptorch.Error``: misuse of a PopTorch API, or a name xlgraph refuses. Like
    PopTorch's, it has ``message``, ``type`` (the component that raised it) and ``location``
    (``file:line`` of the user's code the error came through, once raised)."""

    type = "xlgraph.poptorch"

    @property
    def message(self) -> str:
        """The error's text."""
        return str(self.args[0]) if self.args else ""

    @property
    def location(self) -> str:
        """``file:line`` of the innermost frame of the traceback outside xlgraph, torch and
        the standard library ("" before the error is raised)."""
        tb, where = self.__traceback__, ""
        while tb is not None:
            path = os.path.abspath(tb.tb_frame.f_code.co_filename)
            if not path.startswith(_LIBRARY_DIRS) and "<frozen" not in path:
                where = f"{os.path.basename(path)}:{tb.tb_lineno}"
            tb = tb.tb_next
        return where


_LIBRARY_DIRS = tuple(os.path.abspath(d) + os.sep for d in {
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),  # the xlgraph package
    sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
    sysconfig.get_paths()["platlib"]})


class RecoverableError(Error):
    """PopTorch raises it for a device failure that a reset recovers from, naming the reset in
    ``recovery_action``. The simulator has no device that fails, so xlgraph never raises it;
    it exists so that PopTorch's ``except poptorch.RecoverableError`` clauses run."""

    recovery_action = "IPU_RESET"


class UnrecoverableError(Error):
    """PopTorch raises it when the machine must be taken offline; never raised by xlgraph (no
    device), it exists so that PopTorch's ``except`` clauses run."""


_HW = "no IPU hardware: the simulator needs no device selection"
_POPLAR = "Poplar/PopART internals have no counterpart in xlgraph's lowering"
_SIM_STATS = "recorded; the ipu_model models one chip's tiles and ignores it"

STATUS: dict[str, tuple[str, str]] = {
    "poptorchAtExit": (IGNORED, "nothing to release: the simulator holds no device"),
    "registerGeometricCustomArgParsers": (IGNORED, "torch_geometric types are not converted"),
    "fps": (REFUSED, "torch_cluster's farthest point sampling is not in xlgraph"),
    "nearest": (REFUSED, "torch_cluster's nearest is not in xlgraph"),
    "set_overlap_for_input": (IGNORED, "host IO is not overlapped with compute on the simulator"),
    "set_overlap_for_output": (IGNORED, "host IO is not overlapped with compute on the simulator"),
    "set_available_memory": (IGNORED, "an identity op; the ipu_model has no term for the "
                                       "proportion of temporary memory"),
    "Block": (RECORDED, "its ipu_id sizes the ipu_model (num_ipus); ops run in one program"),
    "BeginBlock": (RECORDED, "its ipu_id sizes the ipu_model (num_ipus); ops run in one program"),
    "BlockFunction": (RECORDED, "its ipu_id sizes the ipu_model; ops run in one program"),
    "LegacyBeginBlockFn": (RECORDED, "the wrapped layer runs; its block is recorded"),
    "removeBlocks": (RECORDED, "removes the recorded blocks"),
    "MultiConv": (RECORDED, "its convolutions run one by one; plan settings are recorded"),
    "MultiConv.availableMemoryProportions": (IGNORED, _SIM_STATS),
    "MultiConv.partialsTypes": (IGNORED, _SIM_STATS),
    "MultiConv.enableConvDithering": (IGNORED, _SIM_STATS),
    "MultiConv.planType": (IGNORED, _SIM_STATS),
    "MultiConv.perConvReservedTiles": (IGNORED, _SIM_STATS),
    "MultiConv.cycleBackOff": (IGNORED, _SIM_STATS),
    "custom_op": (RECORDED, "runs when the name is a torch op xlgraph converts (Relu...); "
                            "C++ PopART ops are refused"),
    "Stage": (RECORDED, "its ipu sizes the ipu_model; every stage runs in one program"),
    "Phase": (RECORDED, "phases are recorded; every phase runs in one simulated program"),
    "PipelinedExecution": (RECORDED, "the ipu_model counts its IPUs; no pipeline overlap is "
                                         "modelled"),
    "ShardedExecution": (RECORDED, "the ipu_model counts its IPUs"),
    "ParallelPhasedExecution": (RECORDED, "the ipu_model counts its IPUs; phases run as one"),
    "SerialPhasedExecution": (RECORDED, "the ipu_model counts its IPUs; phases run as one"),
    "TensorLocationSettings": (RECORDED, "settings are recorded; all tensors stay on chip"),
    "Options.autoRoundNumIPUs": (IGNORED, _HW),
    "Options.connectionType": (IGNORED, _HW),
    "Options.syncPattern": (IGNORED, _HW),
    "Options.useIpuId": (IGNORED, _HW),
    "Options.useOfflineIpuTarget": (IGNORED, _HW),
    "Options.setExecutionStrategy": (RECORDED, "the ipu_model counts the IPUs its stages use"),
    "Options.setAvailableMemoryProportion": (RECORDED, "read back as available_memory_proportion; "
                                             "the ipu_model has no term for it"),
    "Options.enableExecutableCaching": (IGNORED, "the simulator compiles in seconds; no cache"),
    "Options.logDir": (IGNORED, "xlgraph does not log"),
    "Options.maxRepeatLogs": (IGNORED, "xlgraph does not log"),
    "Options.modelName": (IGNORED, "recorded; only used in PopTorch's logs"),
    "Options.sourceLocationExcludes": (IGNORED, "errors always point at the user's line"),
    "Options.appendToLocationExcludes": (IGNORED, "errors always point at the user's line"),
    "Options.relaxOptimizerAttributesChecks": (IGNORED, "optimiser checks are always strict"),
    "Options.broadcastBuffers": (IGNORED, "replicas start from the same buffers already"),
    "Options.enableStableNorm": (IGNORED, "norms are always computed in the stable form"),
    "Options.enableSyntheticData": (RECORDED, "inputs are replaced by zeros"),
    "Options.logCycleCount": (RECORDED, "cycleCount() reads the ipu_model's report"),
    "Options.disableModuleNamescope": (IGNORED, "op names do not carry module scopes"),
    "Options.updatableNamedBuffers": (RECORDED, "named buffers are re-uploaded on request"),
    "opts.Jit.traceModel": (IGNORED, "capture always uses torch's dispatcher"),
    "opts.Precision.runningStatisticsAlwaysFloat": (IGNORED, _SIM_STATS),
    "opts.Precision.enableStochasticRounding": (IGNORED, "float16 rounds to nearest"),
    "opts.Precision.setPartialsType": (IGNORED, "partials use the op's dtype (numpy)"),
    "opts.Precision.enableFloatingPointExceptions": (RECORDED, "the Session raises at the "
                                                               "first NaN/Inf (check_numerics)"),
    "opts.Training.setAutomaticLossScaling": (IGNORED, "loss_scaling stays as the optimiser sets"),
    "opts.Training.setConvolutionDithering": (IGNORED, _SIM_STATS),
    "opts._Popart.set": (RECORDED, _POPLAR),
    "opts._Popart.setEngineOptions": (RECORDED, _POPLAR),
    "opts._Popart.setPatterns": (RECORDED, _POPLAR),
    "opts.Distributed.setEnvVarNames": (RECORDED, "process ids come from these variables"),
    "opts.TensorLocations.numIOTiles": (RECORDED, "the ipu_model reserves these IO tiles"),
    "opts.TensorLocations.setActivationLocation": (RECORDED, "all tensors stay on chip"),
    "opts.TensorLocations.setWeightLocation": (RECORDED, "all tensors stay on chip"),
    "opts.TensorLocations.setOptimizerLocation": (RECORDED, "all tensors stay on chip"),
    "opts.TensorLocations.setAccumulatorLocation": (RECORDED, "all tensors stay on chip"),
    "optim.SGD": (RECORDED, "velocity_scaling and use_combined_accum are recorded: the "
                            "velocity is kept unscaled (equal in float32)"),
    "PoplarExecutor.getPerfCounters": (IGNORED, "no hardware timers; returns empty counters"),
    "PoplarExecutor.getHostIpuLatency": (IGNORED, "no hardware timers; returns zeros"),
    "PoplarExecutor.getComputeLatency": (IGNORED, "no hardware timers; returns zeros"),
    "PoplarExecutor.getIpuHostLatency": (IGNORED, "no hardware timers; returns zeros"),
    "PoplarExecutor.getLatency": (IGNORED, "no hardware timers; returns zeros"),
}


def status(path: str) -> tuple[str, str]:
    """``(status, why)`` of a surface path; ``("supported", "")`` when it simply works."""
    return STATUS.get(path, ("supported", ""))


def refuse(name: str, why: str | None = None) -> NoReturn:
    """Raise ``poptorch.Error`` in one line naming ``name``, why, and the support page."""
    why = why or STATUS.get(name, (REFUSED, "not supported by xlgraph"))[1]
    raise Error(f"poptorch.{name} is not supported by xlgraph: {why} (see {SUPPORT_PAGE})")


def unknown(owner: str, name: str) -> AttributeError:
    """The AttributeError for a name PopTorch may have but xlgraph does not, in one line."""
    return AttributeError(f"{owner}.{name} is not part of xlgraph's PopTorch API "
                          f"(see {SUPPORT_PAGE} for what is supported)")
