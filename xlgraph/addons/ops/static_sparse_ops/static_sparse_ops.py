"""``popxl_addons.ops.static_sparse_ops``: dense times constant-sparse matrix products (the
record is ``xlgraph.ops.sparse``)."""

from xlgraph.ops.sparse import dense_const_sparse_matmul, random_sparse

__all__ = ["dense_const_sparse_matmul", "random_sparse"]
