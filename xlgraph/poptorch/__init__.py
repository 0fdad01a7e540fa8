"""PopTorch's API on xlgraph: ``import xlgraph.poptorch as poptorch`` runs PopTorch programs.

``trainingModel``/``inferenceModel`` capture a ``torch.nn.Module`` into an xlgraph graph (one
conversion table, ``xlgraph.poptorch.table``), train it with the training-step builder of
``xlgraph.training`` and keep the module's weights in sync. ``Options``, ``DataLoader``,
``poptorch.optim`` and PopTorch's own ops follow PopTorch's semantics;
``docs/poptorch-support.md`` lists every PopTorch name and what it does here.

Example:
    >>> import xlgraph.poptorch as poptorch
    >>> opts = poptorch.Options().deviceIterations(50)
    >>> model = poptorch.trainingModel(net_with_loss, opts, torch.optim.SGD(net.parameters(), 0.03))
    >>> preds, loss = model(images, labels)      # 50 SGD steps of batch len(images) / 50
"""

from __future__ import annotations

from typing import Any

try:
    import torch  # noqa: F401 - fail early with the extra's name
except ImportError as exc:  # pragma: no cover - exercised by a subprocess test
    raise ImportError("xlgraph.poptorch needs torch: pip install 'xlgraph[torch]'") from exc

from xlgraph.poptorch import _impl, log, optim
from xlgraph.poptorch.api_ops import (
    cond,
    custom_op,
    dynamic_slice,
    dynamic_update,
    for_loop,
    ipu_print_tensor,
    nop,
    recomputationCheckpoint,
    serializedMatMul,
    set_available_memory,
    set_overlap_for_input,
    set_overlap_for_output,
)
from xlgraph.poptorch.blocks import (
    CPU,
    BeginBlock,
    Block,
    BlockFunction,
    ICustomArgParser,
    LegacyBeginBlockFn,
    MultiConv,
    NameScope,
    module_repr,
    registerCustomArgParser,
    registerGeometricCustomArgParsers,
    removeBlocks,
)
from xlgraph.poptorch.capture import capturing
from xlgraph.poptorch.ctc_decoder import ctc_beam_search_decoder
from xlgraph.poptorch.dataloader import AsynchronousDataAccessor, DataLoader
from xlgraph.poptorch.enums import (
    AnchorMode,
    AutoStage,
    CommGroupType,
    ConnectionType,
    DataLoaderMode,
    HalfFloatCastingBehavior,
    Liveness,
    MatMulSerializationMode,
    MeanReductionStrategy,
    MultiConvPlanType,
    OutputMode,
    OverlapMode,
    ReductionType,
    SharingStrategy,
    SyncPattern,
    VariableRetrievalMode,
)
from xlgraph.poptorch.executor import (
    PoplarExecutor,
    inferenceModel,
    registerPostCompileHook,
    registerPreCompileHook,
    trainingModel,
)
from xlgraph.poptorch.identity import identity_loss
from xlgraph.poptorch.lowering import UnsupportedOpError
from xlgraph.poptorch.options import (
    Attribute,
    ConfigFileError,
    Options,
    ParallelPhasedExecution,
    Phase,
    PipelinedExecution,
    SerialPhasedExecution,
    ShardedExecution,
    Stage,
    TensorLocationSettings,
)
from xlgraph.poptorch.replica_grouped import install as _install_replica_grouping
from xlgraph.poptorch.support import Error, RecoverableError, UnrecoverableError, refuse, unknown

_install_replica_grouping()  # torch.nn.Parameter.replicaGrouping, as PopTorch adds it

__all__ = [
    "AnchorMode", "AsynchronousDataAccessor", "Attribute", "AutoStage", "BeginBlock", "Block",
    "BlockFunction", "CPU", "CommGroupType", "ConfigFileError", "ConnectionType", "DataLoader",
    "DataLoaderMode", "Error", "RecoverableError", "UnrecoverableError",
    "HalfFloatCastingBehavior", "ICustomArgParser",
    "LegacyBeginBlockFn", "Liveness", "MatMulSerializationMode", "MeanReductionStrategy",
    "MultiConv", "MultiConvPlanType", "NameScope", "Options", "OutputMode", "OverlapMode",
    "ParallelPhasedExecution", "Phase", "PipelinedExecution", "PoplarExecutor", "ReductionType",
    "SerialPhasedExecution", "ShardedExecution", "SharingStrategy", "Stage", "SyncPattern",
    "TensorLocationSettings", "UnsupportedOpError", "VariableRetrievalMode", "cond",
    "ctc_beam_search_decoder", "custom_op", "dynamic_slice", "dynamic_update", "for_loop", "fps",
    "identity_loss", "inferenceModel", "ipuHardwareIsAvailable", "ipuHardwareVersion",
    "ipu_print_tensor", "isCompilingWithDispatcher", "isRunningOnIpu", "load", "module_repr",
    "nearest", "nop", "optim", "poptorchAtExit",
    "recomputationCheckpoint", "registerCustomArgParser", "registerPostCompileHook",
    "registerPreCompileHook", "registerGeometricCustomArgParsers",
    "removeBlocks", "serializedMatMul", "set_available_memory", "set_overlap_for_input",
    "set_overlap_for_output", "setLogLevel", "trainingModel",
]

def isRunningOnIpu() -> bool:  # noqa: N802
    """True while a model's ``forward`` is captured for the device, False when torch runs it
    on the host (as PopTorch: ``forward`` may take an IPU-only path)."""
    return _impl.isRunningOnIpu()


def isCompilingWithDispatcher() -> bool:  # noqa: N802
    """True while a model is captured: xlgraph always captures at the ATen dispatcher level,
    as PopTorch's dispatcher-based compiler does."""
    return capturing()


def ipuHardwareIsAvailable(num_ipus: int = 1) -> bool:  # noqa: N802
    """False: xlgraph simulates the device."""
    return False


def ipuHardwareVersion() -> str:  # noqa: N802
    """The modelled IPU's version, ``"ipu2"`` (there is no hardware to ask)."""
    return "ipu2"


def setLogLevel(level: int | str) -> None:  # noqa: N802
    """The level of the ``poptorch::python`` logger: ``TRACE|DEBUG|INFO|WARN|ERR|OFF`` or
    PopTorch's number for it (0 to 6)."""
    log.set_level(level)


def poptorchAtExit() -> None:  # noqa: N802
    """Nothing to release: the simulator holds no device between programs."""


def load(filename: str, edit_opts_fn: Any = None) -> PoplarExecutor:
    """The wrapper ``compileAndExport``/``save`` wrote to ``filename``, compiled; the options
    go through ``edit_opts_fn(opts)`` first when given."""
    from xlgraph.poptorch import executable_file

    saved = executable_file.read_model(filename, edit_opts_fn)
    wrapper = trainingModel(saved.model, saved.options, saved.optimizer) if saved.training \
        else inferenceModel(saved.model, saved.options)
    wrapper.compile(**saved.inputs)
    return wrapper


def fps(src: Any, ptr: Any, ratio: float = 0.5, random_start: bool = False) -> Any:
    """Refused: torch_cluster's farthest point sampling is not in xlgraph."""
    refuse("fps")


def nearest(x: Any, y: Any, batch_x: Any = None, batch_y: Any = None) -> Any:
    """Refused: torch_cluster's nearest is not in xlgraph."""
    refuse("nearest")


def __getattr__(name: str) -> Any:
    raise unknown("poptorch", name)
