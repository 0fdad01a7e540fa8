"""``popxl_addons.ops.static_sparse_ops``: a sub-package as in popxl-addons: its
functions live in its module of the same name, re-exported here."""

from .static_sparse_ops import (
    dense_const_sparse_matmul,
    random_sparse,
)

__all__ = ["dense_const_sparse_matmul", "random_sparse"]
