"""The option combinations PopTorch refuses, checked where PopTorch checks them.

Each setter checks its own value (``checks.py``); these rules tie options together, and some
need the traced model (its pipeline stages), so they run when a wrapper is built or compiled.
Every error is a ``poptorch.Error`` naming the options and their values.
"""

from __future__ import annotations

from typing import Any

from xlgraph.poptorch.enums import AutoStage, OutputMode
from xlgraph.poptorch.options import Options
from xlgraph.poptorch.options_strategies import (
    PipelinedExecution,
    ShardedExecution,
    _IExecutionStrategy,
)
from xlgraph.poptorch.support import Error

__all__ = ["check_inference_options", "check_compile_options", "pipeline_stages"]


def check_inference_options(options: Options) -> None:
    """``inferenceModel`` runs no backward pass, so it takes no gradient accumulation.

    Raises:
        Error: ``Training.gradientAccumulation`` other than 1.
    """
    accumulation = options.Training.gradient_accumulation
    if accumulation == 1:
        return
    message = (f"You must set poptorch.Options().Training.gradientAccumulation to 1 or leave it "
               f"as its default value (1) when running a poptorch.inferenceModel(); it is "
               f"{accumulation}.")
    if _pipelined(options.execution_strategy):
        message += (" Use poptorch.Options().deviceIterations to process a sufficient number "
                    "of batches each run for pipelined execution instead.")
    raise Error(message)


def _pipelined(strategy: _IExecutionStrategy | None) -> bool:
    """Whether stages overlap (PopTorch's default strategy is ``PipelinedExecution()``)."""
    if strategy is None:
        return True
    return isinstance(strategy, PipelinedExecution) and not isinstance(strategy, ShardedExecution)


def pipeline_stages(strategy: _IExecutionStrategy | None, blocks: dict[str, int | None]) -> int:
    """The forward pipeline stages of a model whose blocks are ``{user_id: ipu_id}``: a block
    belongs to the stage that names it, else to its IPU's stage (``AutoStage.SameAsIpu``, the
    default) or a stage of its own (``AutoStage.AutoIncrement``)."""
    auto = getattr(strategy, "auto_stage", AutoStage.SameAsIpu)
    stages = list(getattr(strategy, "stages", []))
    keys: set[Any] = set()
    for user_id, ipu in blocks.items():
        named = [i for i, s in enumerate(stages) if user_id in s.blocks]
        if named:
            keys.add(("stage", named[0]))
        elif auto == AutoStage.AutoIncrement:
            keys.add(("block", user_id))
        else:
            keys.add(("ipu", ipu or 0))
    return max(len(keys), 1)


def check_compile_options(options: Options, training: bool,
                          blocks: dict[str, int | None]) -> None:
    """The rules that need the whole configuration and the traced model's blocks.

    Raises:
        Error: an ``EveryN`` period (of the outputs or of an anchored tensor) that does not
            divide ``deviceIterations``; a pipeline deeper than the micro-batches that fill it
            (``Training.gradientAccumulation`` in training, ``deviceIterations`` in
            inference); replicas that ``inputReplicaGrouping``'s group size does not divide.
    """
    iterations = options.device_iterations
    periods = [("poptorch.Options().outputMode(OutputMode.EveryN, ...)", options.output_mode,
                options.output_return_period)]
    periods += [(f"poptorch.Options().anchorTensor({short!r}, ...)", mode, period)
                for short, (_, mode, period) in options.anchored_tensors.items()]
    for where, mode, period in periods:
        if mode == OutputMode.EveryN and (period > iterations or iterations % period):
            raise Error(f"{where}: the output return period ({period}) must be a factor of "
                        f"poptorch.Options().deviceIterations ({iterations}), the batches each "
                        f"run returns outputs from")
    group = options.input_group_size
    replicas = options.replication_factor
    if replicas % group:
        raise Error(f"poptorch.Options().inputReplicaGrouping: the input group size ({group}) "
                    f"must divide poptorch.Options().replicationFactor ({replicas})")
    strategy = options.execution_strategy
    stages = pipeline_stages(strategy, blocks)
    if stages == 1 or not _pipelined(strategy):
        return
    if training:
        depth = 2 * stages - 1
        accumulation = options.Training.gradient_accumulation
        if accumulation < depth:
            raise Error(f"poptorch.Options().Training.gradientAccumulation must be greater than "
                        f"or equal to the number of pipeline stages ({depth}) when using "
                        f"poptorch.PipelinedExecution; it is {accumulation}. A model with "
                        f"{stages} pipeline stages has {stages - 1} more stages when training "
                        f"(its backward pass); use poptorch.ShardedExecution to run the stages "
                        f"one after the other instead")
    elif iterations < stages:
        raise Error(f"poptorch.Options().deviceIterations must be greater than or equal to the "
                    f"number of pipeline stages ({stages}) when using "
                    f"poptorch.PipelinedExecution; it is {iterations}")
