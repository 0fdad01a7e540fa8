"""A tied embedding's two gradients summed in one loop (``lower.embedding_pairs``).

A language model whose head is its token embedding gets the table's gradient as ``add(head's
gradient, gather_grad(dy, tokens))``: numpy's ``gather_grad`` writes a table of zeros
(GPT-2's 50,257 x 768), adds the few token rows, and ``add`` reads both tables. This loop
sums the token rows alone, in the gradient's own buffer (zeroed, then each row of ``dy`` added
in index order, as ``loops.gather_grad_rows``), writes ``a + 0`` to every row of the result and
then adds each summed row to its row once (GPT-2 small's table, 512 tokens, in place: 48.7
against 29.2 ms of CPU for the two loops). The bits are ``add``'s: ``a + 0`` is ``a`` but for
-0.0 and NaN (a signalling NaN comes out quiet), and a summed row, started from +0.0, holds no
-0.0, so ``(a + 0) + g`` is ``a + g`` (and ``x + 0`` is ``x`` for the result's values, so a row
added again is unchanged). In place, ``a + 0`` is written only over runs that hold a zero or a
NaN, found by a read-only pass (that table: 19.1 against 24.3 ms of CPU).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xlgraph.ops.loops import float_only
from xlgraph.tensor import TensorSpec

__all__ = ["gather_grad_add", "gather_grad_add_loop"]

# In place, the loop writes ``a + 0`` only over runs of this many elements that hold a zero or
# a NaN (the only values that ``+ 0`` changes): a read-only pass over the rest of the table.
SCAN_RUN = 4096


def gather_grad_add(a, dy, indices, rows, out, zero_oor):  # noqa: ANN001, ANN201
    """``out = a + gather_grad(dy, indices)`` along axis 0; ``rows`` (the gradient's buffer,
    not ``out``) holds the indexed rows' sums, its other rows untouched. Indices as in
    ``gather_grad_rows``: negative ones count from the end unless ``zero_oor`` is 1, which
    skips them; out-of-range ones are skipped. ``out`` may be ``a``."""
    n = out.shape[0]
    rs, outs, as_ = rows.reshape(-1), out.reshape(-1), a.reshape(-1)
    dys, idx = dy.reshape(-1), indices.reshape(-1)
    width = outs.size // n if n else 0
    zero = outs.dtype.type(0)
    for phase in range(3):  # zero the indexed rows, sum dy into them, add them to a + 0
        if phase == 2 and out.ctypes.data != a.ctypes.data:
            for i in range(outs.size):
                outs[i] = as_[i] + zero
        elif phase == 2:  # in place: a + 0 only in the runs that hold a zero or NaN
            for base in range(0, outs.size, SCAN_RUN):
                run = outs[base:base + SCAN_RUN]
                hits = 0
                for i in range(run.size):  # read only, vectorised
                    hits += np.int32(not abs(run[i]) > zero)
                if hits:
                    run += zero
        for r in range(idx.size):
            k = idx[r] + n if idx[r] < 0 and zero_oor == 0 else idx[r]
            if not 0 <= k < n:
                continue
            row = rs[k * width:(k + 1) * width]
            if phase == 0:
                row[:] = zero
            elif phase == 1:
                row += dys[r * width:(r + 1) * width]
            else:
                outs[k * width:(k + 1) * width] += row
                row[:] = zero


def gather_grad_add_loop(ins: list[TensorSpec], zero_oor: bool) -> Any:
    """The loop form of one pair on ``ins`` = ``a``, ``dy``, the indices: float data of one
    dtype, integer indices."""
    if ins[0].dtype != ins[1].dtype or not ins[2].dtype.is_int:
        return None
    return float_only(ins[0], gather_grad_add, ints=(int(zero_oor),))
