"""``popxl_addons.ops.grad_reduce_square_add``: a sub-package as in popxl-addons: its
functions live in its module of the same name, re-exported here."""

from .grad_reduce_square_add import (
    grad_reduce_square_add,
)

__all__ = ["grad_reduce_square_add"]
