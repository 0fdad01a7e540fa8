"""``LayerNorm`` (over the last axis of 2-D data) and ``GroupNorm`` (over channel groups)."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

import xlgraph as popxl
from xlgraph import ops
from xlgraph.addons.layers.common import host_array
from xlgraph.addons.module import Module
from xlgraph.addons.utils import WeightsDict

__all__ = ["LayerNorm", "GroupNorm"]


def norm_mapping(variables: Any, nn_layer: Any, dtype: popxl.dtype) -> WeightsDict:
    """``weight`` and ``bias`` of a torch normalisation layer."""
    return WeightsDict({variables.weight: host_array(nn_layer.weight, dtype),
                        variables.bias: host_array(nn_layer.bias, dtype)})


class LayerNorm(Module):
    """Layer normalisation of ``(N, C)`` data with a learnt ``weight`` (ones) and ``bias``
    (zeros) of ``(C,)``."""

    def build(self, x: popxl.Tensor, eps: float = 1e-5) -> popxl.Tensor:
        """Normalise each row of ``x``.

        Raises:
            ValueError: ``x`` is not 2-D.
        """
        if x.rank != 2:
            raise ValueError(f"LayerNorm: x must be 2-D (N, C), got {x.spec}")
        w = self.add_variable_input("weight", partial(np.ones, x.shape[-1]), x.dtype)
        b = self.add_variable_input("bias", partial(np.zeros, x.shape[-1]), x.dtype)
        return ops.layer_norm(x, w, b, eps=eps)

    @staticmethod
    def torch_mapping(variables: Any, nn_layer: Any, dtype: popxl.dtype = popxl.float32,
                      ) -> WeightsDict:
        """The values of a ``torch.nn.LayerNorm`` for ``variables``; a layer over several
        trailing dimensions gives its weight and bias flattened to the variables' shapes."""
        return WeightsDict({
            variables.weight: host_array(nn_layer.weight, dtype).reshape(variables.weight.shape),
            variables.bias: host_array(nn_layer.bias, dtype).reshape(variables.bias.shape)})


class GroupNorm(Module):
    """Group normalisation of ``(N, C, *)`` data over ``num_groups`` channel groups, with a
    ``weight`` (ones) and ``bias`` (zeros) of ``(C,)``.

    Args:
        num_groups: channel groups (dividing C).
        replica_grouping: replicas sharing the variables.
        eps: added to the variance.
        cache: ``Module``'s.
    """

    def __init__(self, num_groups: int, replica_grouping: popxl.ReplicaGrouping | None = None,
                 eps: float = 1e-5, cache: bool = False) -> None:
        super().__init__(cache=cache)
        self.num_groups = num_groups
        self.replica_grouping = replica_grouping
        self.eps = eps

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        """Normalise ``x``."""
        channels = x.shape[1]
        w = self.add_variable_input("weight", partial(np.ones, channels), x.dtype,
                                    replica_grouping=self.replica_grouping)
        b = self.add_variable_input("bias", partial(np.zeros, channels), x.dtype,
                                    replica_grouping=self.replica_grouping)
        return ops.group_norm(x, w, b, self.num_groups, self.eps)

    @staticmethod
    def torch_mapping(variables: Any, nn_layer: Any, dtype: popxl.dtype = popxl.float32,
                      ) -> WeightsDict:
        """The values of a ``torch.nn.GroupNorm`` for ``variables``."""
        return norm_mapping(variables, nn_layer, dtype)
