"""``Linear``: ``x @ weight + bias``."""

from __future__ import annotations

from functools import partial

import numpy as np

import xlgraph as popxl
from xlgraph.addons.module import Module

__all__ = ["Linear"]


class Linear(Module):
    """A dense layer. ``weight`` is drawn from N(0, 0.02) and ``bias`` starts at zero.

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
            "weight", partial(np.random.normal, 0, 0.02, (x.shape[-1], self.out_features)),
            x.dtype, replica_grouping=self.replica_grouping)
        y = x @ w
        if self.bias:
            b = self.add_variable_input("bias", partial(np.zeros, y.shape[-1]), x.dtype,
                                        replica_grouping=self.replica_grouping)
            y = y + b
        return y
