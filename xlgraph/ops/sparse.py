"""Dense times constant-sparse matrix products (popxl-addons' ``static_sparse_ops``): the sparse
right-hand side is a host CSR matrix (``scipy.sparse.csr_matrix`` or anything with ``data``,
``indices``, ``indptr`` and ``shape``), held as a constant of the op; inference only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from xlgraph import dtypes
from xlgraph.cost import Cost, traffic
from xlgraph.errors import DTypeError, ShapeError
from xlgraph.op import OpDef, Sample, apply1, register
from xlgraph.ops.replicas import unchanged
from xlgraph.tensor import Tensor, TensorSpec

__all__ = ["SparseConstant", "dense_const_sparse_matmul", "random_sparse"]


@dataclass(frozen=True, eq=False)
class SparseConstant:
    """A CSR matrix held by an op: non-zeros as float32, as popxl-addons stores them."""

    data: np.ndarray
    indices: np.ndarray
    indptr: np.ndarray
    shape: tuple[int, int]

    @classmethod
    def of(cls, matrix: Any) -> SparseConstant:
        """From a CSR matrix (scipy's, or any object with its four attributes)."""
        if isinstance(matrix, SparseConstant):
            return matrix
        if hasattr(matrix, "tocsr"):
            matrix = matrix.tocsr()
        try:
            parts = (np.asarray(matrix.data, np.float32), np.asarray(matrix.indices, np.int64),
                     np.asarray(matrix.indptr, np.int64))
            shape = tuple(int(d) for d in matrix.shape)
        except AttributeError as exc:
            raise TypeError(f"rhs must be a CSR matrix (e.g. scipy.sparse.csr_matrix), got "
                            f"{type(matrix).__name__}") from exc
        if len(shape) != 2 or len(parts[2]) != shape[0] + 1:
            raise ShapeError(f"rhs must be a 2-D CSR matrix, got shape {shape} with "
                             f"{len(parts[2])} row pointers")
        return cls(*parts, shape)  # type: ignore[arg-type]

    @classmethod
    def from_dense(cls, dense: np.ndarray) -> SparseConstant:
        rows, cols = np.nonzero(dense)
        indptr = np.searchsorted(rows, np.arange(dense.shape[0] + 1))
        return cls(dense[rows, cols].astype(np.float32), cols.astype(np.int64),
                   indptr.astype(np.int64), tuple(dense.shape))  # type: ignore[arg-type]

    @property
    def nnz(self) -> int:
        return len(self.data)

    def dense(self, dtype: Any = np.float32) -> np.ndarray:
        out = np.zeros(self.shape, dtype)
        rows = np.repeat(np.arange(self.shape[0]), np.diff(self.indptr))
        out[rows, self.indices] = self.data.astype(dtype)
        return out

    def __repr__(self) -> str:
        return f"SparseConstant(shape={self.shape}, nnz={self.nnz})"


def _infer(lhs: TensorSpec, rhs: SparseConstant, output_cols: int) -> TensorSpec:
    if lhs.dtype not in (dtypes.float16, dtypes.float32):
        raise DTypeError(f"lhs must be float16 or float32, got {lhs}")
    grouped = len(lhs.shape) == 3 and lhs.shape[0] == 1
    if len(lhs.shape) != 2 and not grouped:
        raise ShapeError(f"lhs must be rank 2 (m, k), or rank 3 with group 1, got {lhs}")
    if rhs.shape != (lhs.shape[-1], output_cols):
        raise ShapeError(f"rhs {rhs.shape} must be (k, output_cols) = "
                         f"{(lhs.shape[-1], output_cols)}")
    return TensorSpec(lhs.shape[:-1] + (output_cols,), lhs.dtype)


def _kernel(lhs: np.ndarray, rhs: SparseConstant, output_cols: int) -> np.ndarray:
    """``lhs @ R`` with ``R``'s non-zeros in ``lhs``'s dtype, accumulated in float32."""
    r = rhs.dense(lhs.dtype).astype(np.float32)
    return (lhs.astype(np.float32) @ r).astype(lhs.dtype)


def _reference(lhs: np.ndarray, rhs: SparseConstant, output_cols: int) -> np.ndarray:
    out = np.zeros(lhs.shape[:-1] + (output_cols,), np.float64)
    for row in range(rhs.shape[0]):
        for k in range(rhs.indptr[row], rhs.indptr[row + 1]):
            out[..., rhs.indices[k]] += lhs[..., row] * float(lhs.dtype.type(rhs.data[k]))
    return out


def _cost(ins: list[TensorSpec], outs: list[TensorSpec], rhs: SparseConstant,
          output_cols: int) -> Cost:
    """A multiply-add per non-zero and row; the constant's bytes count as code, not reads."""
    rows = int(np.prod(ins[0].shape[:-1]))
    return traffic(ins, outs, 2.0 * rows * rhs.nnz, matrix=True)


def _samples(rng: np.random.Generator) -> list[Sample]:
    def sparse(k: int, n: int) -> SparseConstant:
        return SparseConstant.from_dense(_zero_out(rng.normal(size=(k, n)), 0.4, rng))

    return [Sample((rng.normal(size=(3, 5)), sparse(5, 4), 4)),
            Sample((rng.normal(size=(1, 2, 6)), sparse(6, 3), 3))]


# the kernel's product broadcasts over leading axes: the replica axis too
_DENSE_SPARSE = OpDef("dense_const_sparse_matmul", _infer, _kernel, ref=_reference,
                      samples=_samples, cost=_cost, tol=1e-5, replicated=unchanged(_kernel))


@register(_DENSE_SPARSE)
def dense_const_sparse_matmul(lhs: Tensor, rhs: Any, output_cols: int) -> Tensor:
    """``lhs @ R`` for ``lhs`` float16/float32 ``(m, k)`` (or ``(1, m, k)``) and the constant
    sparse ``R`` ``(k, output_cols)`` (a CSR matrix; non-zeros held as float32, used in
    ``lhs``'s dtype), accumulated in float32; inference only (no gradient)."""
    if lhs.dtype not in (dtypes.float16, dtypes.float32):
        raise RuntimeError(f"dense_const_sparse_matmul: lhs must be float16 or float32, got "
                           f"{lhs.id} {lhs.spec}")
    return apply1(_DENSE_SPARSE, [lhs], {"rhs": SparseConstant.of(rhs),
                                         "output_cols": int(output_cols)})


def random_sparse(dense: np.ndarray, density: float = 0.5) -> np.ndarray:
    """Zero each element of ``dense`` in place with probability ``1 - density``, keeping at
    least one element; returns ``dense``."""
    return _zero_out(dense, density, np.random.default_rng())


def _zero_out(dense: np.ndarray, density: float, rng: np.random.Generator) -> np.ndarray:
    keep = rng.random(dense.shape) < density
    if not keep.any() and dense.size:
        keep.flat[rng.integers(dense.size)] = True
    dense[~keep] = 0
    return dense
