"""Execution strategies (``Options.setExecutionStrategy``): ``Stage``, ``Phase``,
``PipelinedExecution``, ``ShardedExecution``, the phased executions and ``IStageManager``.
"""

from __future__ import annotations

from typing import Any

from xlgraph.poptorch.checks import OptionValueError, whole
from xlgraph.poptorch.enums import (
    AutoStage,
    Liveness,
)

__all__ = ["Stage", "Phase", "PipelinedExecution", "ShardedExecution", "ParallelPhasedExecution",
    "SerialPhasedExecution", "IStageManager"]


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
        self.separate_backward_phase = False

    def phase(self, phase: int) -> Phase:
        """The ``phase``-th ``Phase`` (``strategy.phase(0).ipus(0, 1)``)."""
        idx = whole(f"{type(self).__name__}.phase", "phase", phase, 0)
        if idx >= len(self.phases):
            raise OptionValueError(f"{type(self).__name__}.phase: phase {idx} asked for, the "
                                   f"strategy has {len(self.phases)} phases")
        return self.phases[idx]

    def useSeparateBackwardPhase(self, use: bool = True) -> _IPhasedExecution:  # noqa: N802
        """Give the backward pass phases of its own (recorded; phases run as one program)."""
        self.separate_backward_phase = bool(use)
        return self


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
