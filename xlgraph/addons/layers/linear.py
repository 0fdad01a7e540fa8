"""``Linear``: ``x @ weight + bias``."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

import xlgraph as popxl
from xlgraph.addons.layers.common import host_array, truncnorm
from xlgraph.addons.module import Module
from xlgraph.addons.utils import WeightsDict

__all__ = ["Linear"]


class Linear(Module):
    """A dense layer: ``weight`` ``(in, out)`` from a normal(0, 0.02) truncated to ±2σ,
    ``bias`` ``(out,)`` zeros.

    Args:
        out_features: output width.
        bias: add a bias.
        replica_grouping: replicas sharing the variables.
    """

    def __init__(self, out_features: int, bias: bool = True,
                 replica_grouping: popxl.ReplicaGrouping | None = None) -> None:
        super().__init__()
        self.out_features = out_features
        self.bias = bias
        self.replica_grouping = replica_grouping

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        """``x @ weight (+ bias)``."""
        w = self.add_variable_input(
            "weight", partial(truncnorm, (x.shape[-1], self.out_features)), x.dtype,
            replica_grouping=self.replica_grouping)
        y = x @ w
        if self.bias:
            b = self.add_variable_input("bias", partial(np.zeros, y.shape[-1]), x.dtype,
                                        replica_grouping=self.replica_grouping)
            y = y + b
        return y

    @staticmethod
    def torch_mapping(variables: Any, nn_layer: Any, dtype: popxl.dtype = popxl.float32,
                      ) -> WeightsDict:
        """The values of a ``torch.nn.Linear`` for ``variables`` (its weight transposed)."""
        out = WeightsDict({variables.weight: host_array(nn_layer.weight, dtype).T.copy()})
        if getattr(nn_layer, "bias", None) is not None and "bias" in variables:
            out[variables.bias] = host_array(nn_layer.bias, dtype)
        return out
