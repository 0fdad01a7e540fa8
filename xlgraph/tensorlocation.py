"""Where a tensor lives on the IPU: PopXL's placement names.

The simulator keeps every tensor in host memory; these records describe placement for the
ipu_model and for code written against PopXL.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["TensorStorage", "TileSet", "ExecutionContext", "ReplicatedTensorSharding",
           "TensorLocation"]


class TensorStorage(Enum):
    """On-chip SRAM or off-chip streaming memory."""

    OnChip = 0  # noqa: N815 - PopXL's names
    OffChip = 1  # noqa: N815


class TileSet(Enum):
    """The compute tiles or the IO tiles (``popxl.io_tiles()``)."""

    Compute = 0  # noqa: N815
    IO = 1
    Undefined = 2  # noqa: N815


class ExecutionContext(Enum):
    """Which part of the compiled program an op runs in."""

    Normal = 0  # noqa: N815
    AccumulateOuterFragment = 1  # noqa: N815
    WeightsFromHostFragment = 2  # noqa: N815
    WeightsToHostFragment = 3  # noqa: N815
    OptimizerFromHostFragment = 4  # noqa: N815
    Subgraph = 5  # noqa: N815


class ReplicatedTensorSharding(Enum):
    """Whether a tensor is sharded across replicas."""

    Off = 0  # noqa: N815
    On = 1  # noqa: N815


@dataclass(frozen=True)
class TensorLocation:
    """Storage and sharding of a tensor."""

    storage: TensorStorage = TensorStorage.OnChip
    replicated_tensor_sharding: ReplicatedTensorSharding = ReplicatedTensorSharding.Off
