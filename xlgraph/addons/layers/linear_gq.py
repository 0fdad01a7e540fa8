"""``LinearGQ``: a dense layer whose weight is stored 4-bit group-quantised and decompressed
(``ops.group_quantize_decompress``) on use."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

import xlgraph as popxl
from xlgraph.addons.layers.common import host_array
from xlgraph.addons.module import Module
from xlgraph.addons.ops.group_quantize_decompress import (
    group_quantize_compress_numpy,
    group_quantize_decompress,
)
from xlgraph.addons.utils import WeightsDict

__all__ = ["LinearGQ"]


class LinearGQ(Module):
    """``x @ W (+ bias)`` with ``W`` ``(in, out)`` held as ``weight_compressed`` (uint16, four
    4-bit codes each) ``(U, Cd / group_size, group_size / 4)`` and per-group
    ``weight_decompression_scale`` / ``_bias`` ``(U, Cd / group_size, 1)``, all zeros until
    written (``torch_mapping``). ``dim`` -1 or 1 compresses along ``out`` (``Cd = out``,
    ``U = in``); ``dim = 0`` along ``in``, the decompressed matrix transposed back.

    Raises:
        ValueError: ``group_size`` is not a positive multiple of 4 (3.4 divides by zero).
    """

    def __init__(self, out_features: int, bias: bool = True,
                 replica_grouping: popxl.ReplicaGrouping | None = None, group_size: int = 0,
                 dim: int = -1) -> None:
        super().__init__()
        self.out_features = out_features
        self.bias = bias
        self.replica_grouping = replica_grouping
        self.group_size = group_size
        self.dim = dim

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        """``x @ decompress(weight) (+ bias)``."""
        gs = self.group_size
        if gs <= 0 or gs % 4:
            raise ValueError(f"LinearGQ: group_size must be a positive multiple of 4, got {gs}")
        n_in, n_out = x.shape[-1], self.out_features
        uncompressed, compressed = (n_out, n_in) if self.dim == 0 else (n_in, n_out)
        if compressed % gs:
            raise ValueError(f"LinearGQ: group_size {gs} does not divide {compressed}")
        rg = self.replica_grouping
        codes = self.add_variable_input(
            "weight_compressed", partial(np.zeros, (uncompressed, compressed // gs, gs // 4)),
            popxl.uint16, replica_grouping=rg)
        groups = (uncompressed, compressed // gs, 1)
        scale = self.add_variable_input("weight_decompression_scale",
                                        partial(np.zeros, groups), x.dtype, replica_grouping=rg)
        shift = self.add_variable_input("weight_decompression_bias",
                                        partial(np.zeros, groups), x.dtype, replica_grouping=rg)
        w = group_quantize_decompress(codes, scale, shift, dim=0 if self.dim == 0 else -1)
        y = x @ w
        if self.bias:
            b = self.add_variable_input("bias", partial(np.zeros, n_out), x.dtype,
                                        replica_grouping=rg)
            y = y + b
        return y

    @staticmethod
    def torch_mapping(variables: Any, nn_layer: Any, dtype: popxl.dtype = popxl.float32,
                      group_size: int = 64, dim: int = -1) -> WeightsDict:
        """The compressed values of a ``torch.nn.Linear`` (its weight transposed to
        ``(in, out)``, compressed along ``dim``), scale and bias in ``dtype``."""
        weight = host_array(nn_layer.weight, popxl.float32).T
        packed, scale, shift = group_quantize_compress_numpy(weight, group_size, dim)
        out = WeightsDict({
            variables.weight_compressed: packed.astype(np.uint16),
            variables.weight_decompression_scale: scale.astype(dtype.as_numpy()),
            variables.weight_decompression_bias: shift.astype(dtype.as_numpy())})
        if getattr(nn_layer, "bias", None) is not None and "bias" in variables:
            out[variables.bias] = host_array(nn_layer.bias, dtype)
        return out
