"""``popxl_addons.ops.grad_reduce_square_add``: the float32 sum of squares of a loss-scaled
gradient, unscaled (the record is in ``xlgraph.ops.optim_updates``)."""

from xlgraph.ops.optim_updates import grad_reduce_square_add

__all__ = ["grad_reduce_square_add"]
