"""``LinearFP8``: a dense layer computed in fp8 with power-of-two scales, with its own
gradient (``build_grad``) in fp8."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

import xlgraph as popxl
from xlgraph import ops
from xlgraph.addons.layers.common import truncnorm
from xlgraph.addons.layers.linear import Linear
from xlgraph.addons.module import Module
from xlgraph.addons.ops import fp8_amax_scale
from xlgraph.addons.ops.fp8_mse_scale import fp8_mse_scale
from xlgraph.addons.utils import WeightsDict

__all__ = ["LinearFP8"]

_METRICS = ("amax", "mse", "manual_scale")
F143, F152 = popxl.float8_143, popxl.float8_152


class LinearFP8(Module):
    """``x @ weight (+ bias)`` with ``W`` and ``x`` cast to fp8 (1-4-3) under power-of-two
    scales ``sw``, ``sx`` chosen by ``scale_metric`` (``"amax"``, ``"mse"``, or
    ``"manual_scale"``: the constant ``scale``); ``y = (x8 @ W8) * 2^(-sw-sx)`` in float16
    (float32 when ``x`` is), plus the bias. The gradient casts ``dy`` to fp8 (1-5-2) with the
    scale ``clip(scale(dy) - 3, -31, 31)``. It overrides ``build_grad``: build it with
    ``create_graph`` / ``call_module`` (an inline call raises by default). 2-D ``x``.

    Raises:
        ValueError: an unknown ``scale_metric``.
    """

    def __init__(self, out_features: int, bias: bool = True, scale_metric: str = "amax",
                 scale: int = 0, replica_grouping: popxl.ReplicaGrouping | None = None) -> None:
        super().__init__()
        if scale_metric not in _METRICS:
            raise ValueError(f"LinearFP8: scale_metric {scale_metric!r} must be one of "
                             f"{list(_METRICS)}")
        self.out_features = out_features
        self.bias = bias
        self.scale_metric = scale_metric
        self.scale = int(scale)
        self.replica_grouping = replica_grouping

    def _scale(self, t: popxl.Tensor, dtype: popxl.dtype) -> popxl.Tensor:
        if self.scale_metric == "amax":
            return fp8_amax_scale(t, dtype)
        if self.scale_metric == "mse":
            return fp8_mse_scale(t, dtype)
        return popxl.constant(self.scale, popxl.int32, "manual_scale")

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        """The fp8 forward; records the scales and fp8 operands in ``aux``."""
        w = self.add_variable_input(
            "weight", partial(truncnorm, (x.shape[-1], self.out_features)), x.dtype,
            replica_grouping=self.replica_grouping)
        sw, sx = self._scale(w, F143), self._scale(x, F143)
        w8 = ops.pow2scale_cast_to_fp8(w, sw, F143)
        x8 = ops.pow2scale_cast_to_fp8(x, sx, F143)
        self.aux.update(w_log2scale=sw, w_fp8=w8, x_log2scale=sx, x_fp8=x8)
        y = ops.matmul_pow2scaled(x8, w8, -sw - sx)
        if y.dtype != x.dtype:
            y = ops.cast(y, x.dtype)
        if self.bias:
            b = self.add_variable_input("bias", partial(np.zeros, self.out_features), x.dtype,
                                        replica_grouping=self.replica_grouping)
            y = y + b
        return y

    def build_grad(self, dy: popxl.Tensor) -> popxl.Tensor:
        """``dx``, and ``var_grad`` for the weight (and bias), from fp8 operands."""
        sw, w8 = self.aux["w_log2scale"], self.aux["w_fp8"]
        sx, x8 = self.aux["x_log2scale"], self.aux["x_fp8"]
        sg = ops.clip(self._scale(dy, F152) - 3, -31, 31)
        dy8 = ops.pow2scale_cast_to_fp8(dy, sg, F152)
        dx = ops.matmul_pow2scaled(dy8, w8.transpose(), -sw - sg)
        dw = ops.matmul_pow2scaled(dy8.transpose(), x8, -sx - sg).transpose()
        self.var_grad["weight"] = ops.cast(dw, dy.dtype) if dw.dtype != dy.dtype else dw
        if self.bias:
            self.var_grad["bias"] = ops.sum(dy, 0)
        return ops.cast(dx, dy.dtype) if dx.dtype != dy.dtype else dx

    @staticmethod
    def torch_mapping(variables: Any, nn_layer: Any, dtype: popxl.dtype = popxl.float32,
                      ) -> WeightsDict:
        """As ``Linear.torch_mapping``."""
        return Linear.torch_mapping(variables, nn_layer, dtype)

