"""The machine's own limits for ``transformer.py --size small``: its float32 GEMM rate on the
training step's matrix products (the BLAS xlgraph multiplies with: MKL's for the large products
where the ``mkl`` extra is in use, numpy's OpenBLAS otherwise), its rate on generation's vector
products, and its memory copy bandwidth.

``step_products`` lists the products of one training step of ``gpt_model``'s decoder (forward,
then two per forward product in the backward pass: the gradients of both operands).
``gemm_step`` returns a step function that runs exactly those products with xlgraph's own
product kernel (``matmul_out``), so that it
is timed beside the contenders in the same interleaved rounds: the step's FLOPs over that time
is the GEMM rate the machine reaches on these shapes under the load of the moment.
``gemv_step`` runs one generated token's products with numpy (every weight read once): the
floor of a decode step bound by streaming its weights. ``copy_step`` copies a buffer larger
than the caches; its bandwidth counts the bytes read and the bytes written, as STREAM's
``copy`` does. ``token_weight_bytes`` is what generating one
token reads of the weights.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from gpt_model import Config

from xlgraph.ops.matmul_kernel import matmul_out

Product = tuple[tuple[int, ...], int, int, int]  # (leading batch dims, m, k, n)


def forward_products(cfg: Config, batch: int) -> list[Product]:
    """The forward pass's products: per layer q, k, v, the attention scores and context, the
    output projection and the two MLP matrices; then the language-model head."""
    rows, h, s = batch * cfg.seq, cfg.hidden, cfg.seq
    heads = (batch, cfg.heads)
    layer = [((), rows, h, h)] * 3 + [(heads, s, cfg.head_dim, s), (heads, s, s, cfg.head_dim),
                                      ((), rows, h, h), ((), rows, h, cfg.mlp),
                                      ((), rows, cfg.mlp, h)]
    return layer * cfg.layers + [((), rows, h, cfg.vocab)]


def step_products(cfg: Config, batch: int) -> list[Product]:
    """The training step's products: each forward ``A (m, k) @ B (k, n)``, then in the
    backward pass ``dC @ B^T`` (m, n, k) and ``A^T @ dC`` (k, m, n)."""
    fwd = forward_products(cfg, batch)
    return fwd + [p for lead, m, k, n in fwd for p in ((lead, m, n, k), (lead, k, m, n))]


def flops(products: list[Product]) -> int:
    """Multiply-adds times two."""
    return sum(2 * int(np.prod(lead, dtype=np.int64)) * m * k * n for lead, m, k, n in products)


def gemm_step(products: list[Product], seed: int = 0) -> Callable[[int], Any]:
    """``step(i)`` running every product once (xlgraph's ``matmul_out`` into preallocated
    outputs, on operands made once per distinct shape); ``step.operands``: ``(a, b, out)`` of
    each."""
    rng = np.random.default_rng(seed)
    operands: dict[Product, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for p in products:
        lead, m, k, n = p
        if p not in operands:
            operands[p] = (rng.standard_normal((*lead, m, k), np.float32),
                           rng.standard_normal((*lead, k, n), np.float32),
                           np.empty((*lead, m, n), np.float32))
    order = [operands[p] for p in products]

    def step(i: int) -> None:
        for a, b, out in order:
            matmul_out(a, b, out)

    step.operands = order
    return step


def gemv_step(weights: dict[str, np.ndarray], runs: int) -> Callable[[int], Any]:
    """``step(i)`` running ``runs`` times one token's weight products with numpy: a row vector
    times every weight matrix, the tied head as the token embedding's transpose (the biases and
    LayerNorm vectors, 0.1 % of GPT-2 small's bytes, and the position table, of which a token
    reads one row, left out). Each weight is read once a run, as a
    decode step reads it: the time of a decode step that does nothing but stream its weights at
    numpy's ``gemv`` rate. ``step.operands``: ``(x, w, out)`` of each product."""
    mats = [w for name, w in weights.items() if w.ndim == 2 and name not in ("wte", "wpe")]
    mats.append(weights["wte"].T)
    order = [(np.ones((1, w.shape[0]), w.dtype), w, np.empty((1, w.shape[1]), w.dtype))
             for w in mats]

    def step(i: int) -> None:
        for _ in range(runs):
            for x, w, out in order:
                np.matmul(x, w, out=out)

    step.operands = order
    return step


def copy_step(nbytes: int, copies: int) -> Callable[[int], Any]:
    """``step(i)`` copying ``nbytes`` between two float32 buffers ``copies`` times; its
    ``steps`` attribute is ``copies``, so ``harness.interleaved`` reports time per copy."""
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)

    def step(i: int) -> None:
        for _ in range(copies):
            np.copyto(dst, src)

    step.steps = copies
    return step


def copy_bandwidth(nbytes: int, us_per_copy: float) -> float:
    """Bytes per second of a copy of ``nbytes`` (read and written, as STREAM counts)."""
    return 2 * nbytes / (us_per_copy * 1e-6)


def token_weight_bytes(weights: dict[str, np.ndarray]) -> int:
    """Weight bytes one generated token reads: every weight in full (the token embedding as the
    tied head's matrix), except the position table, of which it reads one row."""
    return sum(w.nbytes for name, w in weights.items() if name != "wpe") \
        + weights["wpe"][0].nbytes
