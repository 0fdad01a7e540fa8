"""``Conv2D``: a 2-D convolution of NCHW data with an optional bias."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

import xlgraph as popxl
from xlgraph import ops
from xlgraph.addons.module import Module

__all__ = ["Conv2D"]


def _pair(v: int | tuple[int, int]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


class Conv2D(Module):
    """``ops.conv`` with a ``weight`` of shape ``(out_channels, in_channels / groups, kh, kw)``
    drawn from N(0, 0.02) and a zero ``bias`` per output channel. The arguments follow
    ``ops.conv``; ``paddings`` is ``(top, left, bottom, right)``."""

    def __init__(self, out_channels: int, kernel_size: int | tuple[int, int],
                 strides: tuple[int, int] = (1, 1), paddings: tuple[int, ...] = (0, 0, 0, 0),
                 dilations: tuple[int, int] = (1, 1), groups: int = 1, bias: bool = True,
                 available_memory_proportions: Any = None, partials_types: Any = None,
                 enable_conv_dithering: Any = None,
                 replica_grouping: popxl.ReplicaGrouping | None = None) -> None:
        super().__init__()
        self.out_channels = out_channels
        self.kernel_size = _pair(kernel_size)
        self.strides = strides
        self.paddings = paddings
        self.dilations = dilations
        self.groups = groups
        self.bias = bias
        self.available_memory_proportions = available_memory_proportions
        self.partials_types = partials_types
        self.enable_conv_dithering = enable_conv_dithering
        self.replica_grouping = replica_grouping

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        """Convolve ``x`` of shape ``(N, C, H, W)``."""
        shape = (self.out_channels, x.shape[1] // self.groups, *self.kernel_size)
        w = self.add_variable_input("weight", partial(np.random.normal, 0, 0.02, shape), x.dtype,
                                    replica_grouping=self.replica_grouping)
        y = ops.conv(x, w, self.strides, self.paddings, self.dilations, self.groups,
                     available_memory_proportions=self.available_memory_proportions,
                     partials_types=self.partials_types,
                     enable_conv_dithering=self.enable_conv_dithering)
        if self.bias:
            b = self.add_variable_input("bias", partial(np.zeros, self.out_channels), x.dtype,
                                        replica_grouping=self.replica_grouping)
            y = y + b.reshape((1, self.out_channels, 1, 1))
        return y
