"""``Options.Jit``, ``Options.Precision`` and ``Options.Training``: what one step computes and
in which precision.
"""

from __future__ import annotations

import torch

from xlgraph.poptorch.checks import whole
from xlgraph.poptorch.enums import (
    HalfFloatCastingBehavior,
    MeanReductionStrategy,
    ReductionType,
)
from xlgraph.poptorch.options_dict import OptionsDict


class _JitOptions(OptionsDict):
    """``opts.Jit``: PopTorch's tracing switch (capture always goes through torch's dispatcher)."""

    def __init__(self) -> None:
        super().__init__(trace_model=True)

    def traceModel(self, trace_model: bool) -> _JitOptions:  # noqa: N802
        """Trace with torch.jit (recorded; capture uses torch's dispatcher)."""
        return self._set("trace_model", trace_model)


class _PrecisionOptions(OptionsDict):
    """``opts.Precision``: float16 behaviour of the converted ops."""

    def __init__(self) -> None:
        super().__init__(half_float_casting=HalfFloatCastingBehavior.Default,
                         running_statistics_always_float=True, floating_point_exceptions=False,
                         stochastic_rounding=False, partials_type=torch.float32)

    def halfFloatCasting(self, half_float_casting: HalfFloatCastingBehavior,  # noqa: N802
                         ) -> _PrecisionOptions:
        """How an op with float16 and float32 operands computes: ``HalfUpcastToFloat`` (and
        ``Default``) in float32, torch's rule; ``FloatDowncastToHalf`` in float16, with a
        float16 result (explicit casts such as ``x.float()`` are kept)."""
        return self._set("half_float_casting", HalfFloatCastingBehavior(half_float_casting))

    def runningStatisticsAlwaysFloat(self, value: bool) -> _PrecisionOptions:  # noqa: N802
        """Keep BatchNorm running statistics in float32 (recorded)."""
        return self._set("running_statistics_always_float", value)

    def enableFloatingPointExceptions(self, enabled: bool) -> _PrecisionOptions:  # noqa: N802
        """Raise on NaN/inf results (the Session's floating-point checks)."""
        return self._set("floating_point_exceptions", enabled)

    def enableStochasticRounding(self, enabled: bool) -> _PrecisionOptions:  # noqa: N802
        return self._set("stochastic_rounding", enabled)

    def setPartialsType(self, dtype: torch.dtype) -> _PrecisionOptions:  # noqa: N802
        """``torch.float`` or ``torch.half``; anything else raises ValueError."""
        if dtype not in (torch.float, torch.half):
            raise ValueError(f"setPartialsType: expected torch.float or torch.half, got {dtype}")
        self.checkIsFrozen()
        self._values["partials_type"] = dtype
        return self


class _TrainingOptions(OptionsDict):
    """``opts.Training``: gradient accumulation and how accumulated gradients are reduced."""

    def __init__(self) -> None:
        super().__init__(gradient_accumulation=1,
                         accumulation_and_replication_reduction_type=ReductionType.Mean,
                         mean_accumulation_and_replication_reduction_strategy=(
                             MeanReductionStrategy.Post),
                         automatic_loss_scaling=False, convolution_dithering=False)

    def gradientAccumulation(self, gradient_accumulation: int) -> _TrainingOptions:  # noqa: N802
        """Micro-batches per weight update (a whole number >= 1)."""
        return self._set("gradient_accumulation", whole(
            "Training.gradientAccumulation", "gradient_accumulation", gradient_accumulation))

    def accumulationAndReplicationReductionType(self, reduction_type: ReductionType,  # noqa: N802
                                                ) -> _TrainingOptions:
        """``Mean`` (default) divides the summed gradient by accumulation x replicas."""
        if reduction_type == ReductionType.NoReduction:
            raise ValueError("NoReduction is not a valid accumulation and replication reduction")
        return self._set("accumulation_and_replication_reduction_type",
                         ReductionType(reduction_type))

    def setMeanAccumulationAndReplicationReductionStrategy(  # noqa: N802
            self, mean_reduction_strategy: MeanReductionStrategy) -> _TrainingOptions:
        """``Post`` divides the sum once; ``Running`` keeps a running mean per micro-batch."""
        return self._set("mean_accumulation_and_replication_reduction_strategy",
                         MeanReductionStrategy(mean_reduction_strategy))

    @property
    def meanAccumulationAndReplicationReductionStrategy(  # noqa: N802
            self) -> MeanReductionStrategy:
        """The strategy as PopTorch reads it back (its option key is camelCase)."""
        return self._values["mean_accumulation_and_replication_reduction_strategy"]

    def setAutomaticLossScaling(self, enabled: bool) -> _TrainingOptions:  # noqa: N802
        """Adjust the loss scale automatically (recorded)."""
        return self._set("automatic_loss_scaling", enabled)

    def setConvolutionDithering(self, enabled: bool) -> _TrainingOptions:  # noqa: N802
        """Dither convolution tile allocation (recorded)."""
        return self._set("convolution_dithering", enabled)
