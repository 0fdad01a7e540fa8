"""A bias add and the GELU after it as one loop (``lower.bias_gelu``): a transformer's first
MLP product, ``gelu(x @ w + b)``, whose sum ``h = x @ w + b`` the backward pass reads again.

Run apart, the add reads and writes ``h`` and the GELU reads it again and writes its result:
GPT-2 small's 512 x 3072 product passes over 6 MB four times. The loop adds the bias to a row,
writes it and its GELU while the row is in cache: ``add_rows``'s then ``gelu32``'s operations
(``loops.gelu_value32``), so the bits of the two loops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from xlgraph.core.op import REGISTRY
from xlgraph.ops.loops import add_loop, contracted, gelu32, gelu_value32
from xlgraph.tensor import TensorSpec

__all__ = ["bias_gelu32", "bias_gelu_loop"]


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


def bias_gelu_loop(ins: list[TensorSpec]) -> tuple[Callable[..., None], tuple[Any, ...]] | None:
    """The loop form of ``gelu(add(x, y))`` on ``ins`` = ``x``, ``y``: where ``add`` runs as
    ``add_rows`` and the GELU of the sum as ``gelu32`` (float32), ``bias_gelu32`` with the
    GELU's constants; else None."""
    found = REGISTRY["gelu"].loop([ins[0]]) if add_loop(ins) is not None else None
    if found is None or found[0] is not gelu32:
        return None
    return bias_gelu32, found[1]
