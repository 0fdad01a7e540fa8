"""``popxl_addons.ops.replicated_all_reduce_TP``: a sub-package as in popxl-addons: its
functions live in its module of the same name, re-exported here."""

from .replicated_all_reduce_TP import (
    replicated_all_reduce,
    replicated_all_reduce_identical_grad_inputs,
    replicated_all_reduce_identical_inputs,
)

__all__ = ["replicated_all_reduce_identical_inputs", "replicated_all_reduce_identical_grad_inputs",
           "replicated_all_reduce"]
