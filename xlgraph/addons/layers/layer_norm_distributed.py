"""``LayerNormDistributed``: layer norm over a hidden dimension split across a replica group
(tensor parallelism), with ``ops.layer_norm_distributed``."""

from __future__ import annotations

from functools import partial

import numpy as np

import xlgraph as popxl
from xlgraph.addons.module import Module
from xlgraph.addons.named_replica_grouping import fill_none_group
from xlgraph.addons.ops.layer_norm_distributed import layer_norm_distributed

__all__ = ["LayerNormDistributed"]


class LayerNormDistributed(Module):
    """Each member of ``replica_grouping`` holds ``H / G`` hidden units of ``(N, H)`` data and
    the matching slices of ``weight`` (ones) and ``bias`` (zeros); the variables use the
    transposed grouping (replicas holding the same slice share it). ``None`` means all
    replicas (popxl-addons 3.4 fails at build then).

    Args:
        replica_grouping: the tensor-parallel group.
    """

    def __init__(self, replica_grouping: popxl.ReplicaGrouping | None = None) -> None:
        super().__init__()
        self.replica_grouping = replica_grouping

    def build(self, x: popxl.Tensor, eps: float = 1e-5) -> popxl.Tensor:
        """Normalise ``x`` ``(N, H_local)`` over the whole hidden dimension."""
        group = fill_none_group(self.replica_grouping)
        hidden = x.shape[-1]
        w = self.add_variable_input("weight", partial(np.ones, hidden), x.dtype,
                                    replica_grouping=group.transpose())
        b = self.add_variable_input("bias", partial(np.zeros, hidden), x.dtype,
                                    replica_grouping=group.transpose())
        return layer_norm_distributed(x, w, b, eps, group)
