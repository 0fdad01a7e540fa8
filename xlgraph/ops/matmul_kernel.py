"""``matmul_out``: the matrix product kernel of ``matmul`` and of its replicated forms."""

from __future__ import annotations

import numpy as np

from xlgraph.ops import mkl
from xlgraph.ops.half import narrow_into, temp, widen

__all__ = ["matmul_out"]


def matmul_out(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``np.matmul``, except that two float16 operands multiply in float32 registers (float32
    partials, as the IPU's AMP units accumulate) with the result rounded to float16 on store:
    numpy's own float16 product runs a scalar loop a hundred times slower than float32 BLAS.
    Large float32 and float64 products run on MKL where it is in use (``xlgraph.ops.mkl``)."""
    if a.dtype == np.float16 and b.dtype == np.float16:
        wa, wb = widen(a, 0), widen(b, 1)
        if wa.ndim < 2 or wb.ndim < 2:
            wide = np.matmul(wa, wb)
        else:
            shape = np.broadcast_shapes(wa.shape[:-2], wb.shape[:-2]) + (wa.shape[-2],
                                                                          wb.shape[-1])
            wide = _product(wa, wb, temp(shape, 2))
        if out is None:
            out = np.empty(wide.shape, np.float16)
        narrow_into(out, wide)
        return out
    return _product(a, b, out)


def _product(a: np.ndarray, b: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """``np.matmul(a, b, out=out)``, by MKL where it takes the product."""
    found = mkl.matmul(a, b, out)
    return np.matmul(a, b, out=out) if found is None else found


matmul_out.blas_matmul = True  # type: ignore[attr-defined] - np.matmul on float32/64
