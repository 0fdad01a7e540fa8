"""``Conv2D``: a 2-D convolution of NCHW data with an optional bias."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

import xlgraph as popxl
from xlgraph import ops
from xlgraph.addons.layers.common import host_array, truncnorm
from xlgraph.addons.module import Module
from xlgraph.addons.utils import WeightsDict

__all__ = ["Conv2D"]

_PAD_TYPES = ("same_upper", "same_lower", "valid")


def _pair(v: int | tuple[int, int]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


class Conv2D(Module):
    """``ops.conv`` with a ``weight`` ``(out_channels, in_channels / groups, kh, kw)`` from a
    normal(0, 0.02) truncated to ±2σ and a zero ``bias`` ``(1, out_channels, 1, 1)``.

    An int ``kernel_size`` is square. ``paddings`` is ``(top, left, bottom, right)``, or one of
    ``"same_upper"``, ``"same_lower"``, ``"valid"`` (a pad type, with zero explicit pads).
    After ``build``, the attribute ``bias`` holds the bias tensor (as in popxl-addons).
    """

    def __init__(self, out_channels: int, kernel_size: int | tuple[int, int],
                 strides: tuple[int, int] = (1, 1),
                 paddings: tuple[int, ...] | str = (0, 0, 0, 0),
                 dilations: tuple[int, int] = (1, 1), groups: int = 1, bias: bool = True,
                 available_memory_proportions: Any = None, partials_types: Any = None,
                 enable_conv_dithering: Any = None,
                 replica_grouping: popxl.ReplicaGrouping | None = None) -> None:
        super().__init__()
        if isinstance(paddings, str) and paddings not in _PAD_TYPES:
            raise ValueError(f"Conv2D: paddings {paddings!r} must be a tuple or one of "
                             f"{list(_PAD_TYPES)}")
        self.out_channels = out_channels
        self.kernel_size = _pair(kernel_size)
        self.strides = strides
        self.paddings = paddings
        self.dilations = dilations
        self.groups = groups
        self.bias: Any = bias
        self.available_memory_proportions = available_memory_proportions
        self.partials_types = partials_types
        self.enable_conv_dithering = enable_conv_dithering
        self.replica_grouping = replica_grouping

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        """Convolve ``x`` of shape ``(N, C, H, W)``."""
        shape = (self.out_channels, x.shape[1] // self.groups, *self.kernel_size)
        w = self.add_variable_input("weight", partial(truncnorm, shape), x.dtype,
                                    replica_grouping=self.replica_grouping)
        pads, pad_type = (self.paddings, "not_set") if not isinstance(self.paddings, str) \
            else ((0, 0, 0, 0), self.paddings)
        y = ops.conv(x, w, self.strides, pads, self.dilations, self.groups, pad_type,
                     available_memory_proportions=self.available_memory_proportions,
                     partials_types=self.partials_types,
                     enable_conv_dithering=self.enable_conv_dithering)
        if self.bias is not False and self.bias is not None:
            self.bias = self.add_variable_input(
                "bias", partial(np.zeros, (1, self.out_channels, 1, 1)), x.dtype,
                replica_grouping=self.replica_grouping)
            y = y + self.bias
        return y

    @staticmethod
    def torch_mapping(variables: Any, nn_layer: Any, dtype: popxl.dtype = popxl.float32,
                      ) -> WeightsDict:
        """The values of a ``torch.nn.Conv2d`` for ``variables``."""
        out = WeightsDict({variables.weight: host_array(nn_layer.weight, dtype)})
        if getattr(nn_layer, "bias", None) is not None and "bias" in variables:
            out[variables.bias] = host_array(nn_layer.bias, dtype).reshape(1, -1, 1, 1)
        return out
