"""``popxl_addons.ops.replicated_strided_collectives``: a sub-package as in popxl-addons: its
functions live in its module of the same name, re-exported here."""

from .replicated_strided_collectives import (
    replicated_all_gather_strided,
    replicated_all_reduce_strided,
    replicated_all_reduce_strided_graph,
    replicated_all_reduce_strided_identical_grad_inputs,
    replicated_all_reduce_strided_identical_inputs,
    replicated_reduce_scatter_strided,
)

__all__ = ["replicated_all_reduce_strided", "replicated_all_reduce_strided_identical_inputs",
           "replicated_all_reduce_strided_identical_grad_inputs", "replicated_all_gather_strided",
           "replicated_reduce_scatter_strided", "replicated_all_reduce_strided_graph"]
