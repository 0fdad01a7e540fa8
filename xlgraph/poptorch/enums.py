"""PopTorch's enums, with its member names and values (``poptorch.OutputMode`` and the rest)."""

from __future__ import annotations

import enum

__all__ = [
    "AnchorMode", "AutoStage", "CommGroupType", "ConnectionType", "DataLoaderMode",
    "HalfFloatCastingBehavior", "Liveness", "MatMulSerializationMode", "MeanReductionStrategy",
    "MultiConvPlanType", "OutputMode", "OverlapMode", "ReductionType", "SharingStrategy",
    "SyncPattern", "VariableRetrievalMode",
]


class OutputMode(enum.IntEnum):
    """Which micro-batches' outputs a call returns; ``Default`` resolves when a wrapper is built."""

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


class MeanReductionStrategy(enum.IntEnum):
    """When a ``Mean`` reduction divides: per micro-batch (``Running``) or once (``Post``)."""

    Running = 0
    Post = 1
    PostAndLoss = 2


class DataLoaderMode(enum.IntEnum):
    """How ``poptorch.DataLoader`` loads: in the caller, or ahead of it in a worker process."""

    Sync = 0
    Async = 1
    AsyncRebatched = 2


class SharingStrategy(enum.IntEnum):
    """How ``AsynchronousDataAccessor`` shares batches with its worker."""

    SharedMemory = 0
    FileSystem = 1
    Fork = 2
    ForkServer = 3


class ConnectionType(enum.IntEnum):
    """When the device is attached (``Options.connectionType``)."""

    Always = 0
    OnDemand = 1
    Never = 2


class HalfFloatCastingBehavior(enum.IntEnum):
    """How mixed float32/float16 operands are cast (``opts.Precision.halfFloatCasting``)."""

    FloatDowncastToHalf = 0
    HalfUpcastToFloat = 1
    Default = 2


class SyncPattern(enum.IntEnum):
    """How IPUs synchronise (``Options.syncPattern``)."""

    Full = 0
    SinglePipeline = 1
    ReplicaAndLadder = 2


class MatMulSerializationMode(enum.Enum):
    """Which dimension ``serializedMatMul`` splits."""

    InputChannels = "input_channels"
    ReducingDim = "reducing_dim"
    OutputChannels = "output_channels"
    Disabled = "none"


class Liveness(enum.IntEnum):
    """Where ``SerialPhasedExecution`` keeps tensors between phases."""

    AlwaysLive = 0
    OffChipAfterFwd = 1
    OffChipAfterFwdNoOverlap = 2
    OffChipAfterEachPhase = 3


class OverlapMode(enum.Enum):
    """Whether host IO overlaps compute (``set_overlap_for_input``/``_output``)."""

    NoOverlap = "no_overlap"
    OverlapAccumulationLoop = "overlap_accumulation_loop"
    OverlapDeviceIterationLoop = "overlap_device_iteration_loop"


class AutoStage(enum.IntEnum):
    """How blocks without a stage id are staged (``PipelinedExecution``)."""

    SameAsIpu = 0
    AutoIncrement = 1


class MultiConvPlanType(enum.IntEnum):
    """How a ``MultiConv``'s convolutions are planned."""

    Parallel = 0
    Serial = 1


class CommGroupType(enum.IntEnum):
    """How replicas are grouped (``Options.inputReplicaGrouping``)."""

    All = 0
    Consecutive = 1
    Orthogonal = 2
    NoGrouping = 3


class VariableRetrievalMode(enum.IntEnum):
    """Which replicas' copies of a grouped variable are read back."""

    OnePerGroup = 0
    AllReplicas = 1
