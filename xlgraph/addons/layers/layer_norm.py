"""``LayerNorm``: normalise over the last axis, then scale and shift."""

from __future__ import annotations

from functools import partial

import numpy as np

import xlgraph as popxl
from xlgraph import ops
from xlgraph.addons.module import Module

__all__ = ["LayerNorm"]


class LayerNorm(Module):
    """Layer normalisation with a learnt ``weight`` (ones) and ``bias`` (zeros)."""

    def build(self, x: popxl.Tensor, eps: float = 1e-5) -> popxl.Tensor:
        """Normalise ``x`` over its last axis."""
        w = self.add_variable_input("weight", partial(np.ones, x.shape[-1]), x.dtype)
        b = self.add_variable_input("bias", partial(np.zeros, x.shape[-1]), x.dtype)
        return ops.layer_norm(x, w, b, eps=eps)
