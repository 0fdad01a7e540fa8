"""Two ops as one loop (``lower.loop_pairs``): an op and the one after it that reads its
result, run row by row so that each row is read while it is in cache.

- ``bias_gelu32``: a bias add and the GELU of its sum, a transformer's ``gelu(x @ w + b)``
  (the sum kept for the backward pass). Run apart, the add reads and writes ``h`` and the GELU
  reads it again: GPT-2 small's 512 x 3072 product passes over 6 MB four times.
- ``gelu_grad_sum32``: the GELU's gradient and its sum over the leading axes (the bias's
  gradient), the sum adding each row of the gradient just written.

Each does the two loops' operations in their order (``loops.add_rows`` then ``loops.gelu32``;
``loops.gelu_grad32`` then ``loops.sum_leading``), through the values they share
(``loops.gelu_value32``, ``loops.gelu_grad_value32``): the two loops' bits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from xlgraph.core.op import REGISTRY
from xlgraph.ops.loops import (
    add_loop,
    contracted,
    gelu32,
    gelu_grad32,
    gelu_grad_value32,
    gelu_value32,
    sum_leading,
)
from xlgraph.tensor import TensorSpec

__all__ = ["bias_gelu32", "gelu_grad_sum32", "PAIRS"]

Found = tuple[Callable[..., None], tuple[Any, ...]] | None


@contracted
def bias_gelu32(x, y, h, out, a, b, one, top):  # noqa: ANN001, ANN201 - numba infers the types
    """``h = x + y`` (``y`` repeated over ``x``'s leading axes, as ``loops.add_rows``) and
    ``out = gelu(h)`` (as ``loops.gelu32``), float32; ``h`` may be ``x``, ``out`` is another
    array. Each case is its own loop, so that the compiler's overlap checks pass."""
    xs, ys, hs, outs = x.reshape(-1), y.reshape(-1), h.reshape(-1), out.reshape(-1)
    inner = ys.size
    if hs.ctypes.data == xs.ctypes.data:
        for base in range(0, xs.size, inner):
            hr, o = hs[base:base + inner], outs[base:base + inner]
            for j in range(inner):
                v = hr[j] + ys[j]
                hr[j] = v
                o[j] = gelu_value32(v, a, b, one, top)
    else:
        for base in range(0, xs.size, inner):
            xr, hr, o = xs[base:base + inner], hs[base:base + inner], outs[base:base + inner]
            for j in range(inner):
                v = xr[j] + ys[j]
                hr[j] = v
                o[j] = gelu_value32(v, a, b, one, top)


@contracted
def gelu_grad_sum32(dy, x, out, total, a, b, one, c, d, top, outer):  # noqa: ANN001, ANN201
    """``out = gelu_grad(dy, x)`` (as ``loops.gelu_grad32``) and ``total`` its sum over the
    ``outer`` leading rows (as ``loops.sum_leading``: the first row, then each next one
    added), float32; ``out`` is neither input."""
    dys, xs, outs, tot = dy.reshape(-1), x.reshape(-1), out.reshape(-1), total.reshape(-1)
    inner = tot.size
    for r in range(outer):
        base = r * inner
        g, xr, o = dys[base:base + inner], xs[base:base + inner], outs[base:base + inner]
        for j in range(inner):
            o[j] = gelu_grad_value32(g[j], xr[j], a, b, one, c, d, top)
        if r == 0:
            for j in range(inner):
                tot[j] = o[j]
        else:
            for j in range(inner):
                tot[j] += o[j]


def _bias_gelu_loop(ins: list[TensorSpec]) -> Found:
    """``bias_gelu32`` where ``add`` runs as ``add_rows`` and the GELU of the sum as
    ``gelu32``, with the GELU's constants."""
    found = REGISTRY["gelu"].loop([ins[0]]) if add_loop(ins) is not None else None
    return None if found is None or found[0] is not gelu32 else (bias_gelu32, found[1])


def _gelu_grad_sum_loop(ins: list[TensorSpec], **attrs: Any) -> Found:
    """``gelu_grad_sum32`` where the gradient runs as ``gelu_grad32`` and its sum (``attrs``)
    as ``sum_leading``, with their constants."""
    grad, total = REGISTRY["gelu_grad"].loop(ins), REGISTRY["sum"].loop([ins[0]], **attrs)
    if grad is None or total is None or grad[0] is not gelu_grad32 or total[0] is not sum_leading:
        return None
    return gelu_grad_sum32, (*grad[1], *total[1])


# (first op, second op) -> the pair's loop form: ``(first's input specs, **second's attrs)``.
PAIRS: dict[tuple[str, str], Callable[..., Found]] = {
    ("add", "gelu"): _bias_gelu_loop, ("gelu_grad", "sum"): _gelu_grad_sum_loop}
