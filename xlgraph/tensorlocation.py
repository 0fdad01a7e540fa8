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


@dataclass(frozen=True, eq=False)
class TensorLocationInfo(TensorLocation):
    """A tensor's location as ``Tensor.location_info`` gives it: the ``TensorLocation`` fields
    (it equals the ``TensorLocation`` of the same storage and sharding) and PopART's
    ``TensorLocationInfo`` queries that PopXL programs call on it."""

    remote_buffer_info: tuple[int, int] = (-1, -1)  # (remote buffer id, entry), or unset

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TensorLocation):
            return NotImplemented
        same = (self.storage, self.replicated_tensor_sharding) == (
            other.storage, other.replicated_tensor_sharding)
        info = getattr(other, "remote_buffer_info", None)
        return same and (info is None or info == self.remote_buffer_info)

    __hash__ = TensorLocation.__hash__  # equal to its TensorLocation, so hashed as it

    def isRemote(self) -> bool:  # noqa: N802 - PopART's names
        """Whether the tensor is stored in remote (off-chip) memory."""
        return self.storage == TensorStorage.OffChip

    def isSharded(self) -> bool:  # noqa: N802
        """Whether the tensor is sharded over replicas."""
        return self.replicated_tensor_sharding == ReplicatedTensorSharding.On

    def getRemoteBufferInfo(self) -> tuple[int, int]:  # noqa: N802
        """``(remote buffer id, entry)`` of a remote tensor; ``(-1, -1)`` otherwise."""
        return self.remote_buffer_info
