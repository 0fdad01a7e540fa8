"""Rotary position embedding (popxl-addons' ``rotary_pos_embed``) and its sine/cosine tables.

``t`` is ``(batch, seq, heads, head_dim)``; its first ``rotary_dim`` features form interleaved
pairs ``(a, b) = (x_2i, x_2i+1)`` that turn by ``phi_{m,i} = m * base^(-2i/rotary_dim)`` at
sequence position ``m``: ``a' = a cos - b sin``, ``b' = b cos + a sin``. The rest pass through.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xlgraph import dtypes
from xlgraph.cost import per_output
from xlgraph.errors import DTypeError, ShapeError
from xlgraph.op import OpDef, Sample, apply, apply1, register
from xlgraph.ops.replicas import unchanged
from xlgraph.tensor import Tensor, TensorSpec, constant

__all__ = ["rotary_pos_embed", "trig_tables", "trig_table_constants"]


def trig_tables(seq_len: int, rotary_dim: int, base: float = 10000,
                np_dtype: Any = "float32") -> tuple[np.ndarray, np.ndarray]:
    """``(sin, cos)`` of ``phi_{m,i} = m * base^(-2i/rotary_dim)``, each ``(seq_len,
    rotary_dim/2)``, every step computed in ``np_dtype`` as popxl-addons does (float32
    tables then agree with float32 references such as transformers' to about 1 ulp)."""
    theta = base ** (-np.arange(0, rotary_dim, 2).astype(np_dtype) / rotary_dim)
    theta = np.asarray(theta, np_dtype)
    phi = np.outer(np.arange(seq_len).astype(np_dtype), theta).astype(np_dtype)
    return np.sin(phi), np.cos(phi)


def trig_table_constants(seq_len: int, rotary_dim: int, base: float = 10000,
                         dtype: dtypes.dtype = dtypes.float32) -> tuple[Tensor, Tensor]:
    """``trig_tables`` computed in ``dtype`` (float16 tables in float16) as two constants
    in the current graph."""
    sin, cos = trig_tables(seq_len, rotary_dim, base, dtype.as_numpy())
    return constant(sin, dtype, "sin"), constant(cos, dtype, "cos")


def _tables(table: np.ndarray) -> np.ndarray:
    """A ``(1 or B, S, R/2)`` table lined up with ``(B, S, heads, R/2)`` (any leading axes:
    the replica axis too)."""
    return table[..., None, :]


def _rotate(x: np.ndarray, sin: np.ndarray, cos: np.ndarray, rotary_dim: int) -> np.ndarray:
    s, c = _tables(sin), _tables(cos)
    a, b = x[..., 0:rotary_dim:2], x[..., 1:rotary_dim:2]
    turned_a, turned_b = a * c - b * s, b * c + a * s
    out = np.array(np.broadcast_to(x, turned_a.shape[:-1] + x.shape[-1:]))
    out[..., 0:rotary_dim:2], out[..., 1:rotary_dim:2] = turned_a, turned_b
    return out


def _infer(t: TensorSpec, sin: TensorSpec, cos: TensorSpec, rotary_dim: int) -> TensorSpec:
    if len(t.shape) != 4:
        raise ShapeError(f"t must be rank 4 (batch, seq, heads, head_dim), got {t}")
    if rotary_dim % 2 or not 0 < rotary_dim <= t.shape[-1]:
        raise ShapeError(f"rotary_dim must be even and at most head_dim {t.shape[-1]}, got "
                         f"{rotary_dim}")
    want = (t.shape[1], rotary_dim // 2)
    for name, table in (("sin", sin), ("cos", cos)):
        if (len(table.shape) != 3 or table.shape[1:] != want
                or table.shape[0] not in (1, t.shape[0])):
            raise ShapeError(f"{name} must be (1 or batch {t.shape[0]}, seq, rotary_dim/2) = "
                             f"(1, *{want}) after a leading 1 is added, got {table}")
        if table.dtype != t.dtype:
            raise DTypeError(f"{name} must have t's dtype {t.dtype}, got {table.dtype}")
    return t


def _table_grads(dy: np.ndarray, x: np.ndarray, sin: np.ndarray, cos: np.ndarray,
                 rotary_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Gradients of the tables: ``d sin = sum(-dA b + dB a)``, ``d cos = sum(dA a + dB b)``
    over the heads (and the batch when a table has one row)."""
    a, b = x[..., 0:rotary_dim:2], x[..., 1:rotary_dim:2]
    da, db = dy[..., 0:rotary_dim:2], dy[..., 1:rotary_dim:2]
    axes = (2,) if sin.shape[0] == x.shape[0] else (0, 2)
    dsin = np.sum(db * a - da * b, axis=axes).reshape(sin.shape)
    dcos = np.sum(da * a + db * b, axis=axes).reshape(cos.shape)
    return dsin.astype(sin.dtype), dcos.astype(cos.dtype)


def _grad(g: Any, dy: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    sin, cos, rotary_dim = g.x(1), g.x(2), g.attrs["rotary_dim"]
    dt = apply1(_ROTARY, [dy, -sin, cos], {"rotary_dim": rotary_dim})
    dsin, dcos = apply(_TABLE_GRADS, [dy, g.x(0), sin, cos], {"rotary_dim": rotary_dim})
    return dt, dsin, dcos


def _samples(rng: np.random.Generator) -> list[Sample]:
    def tables(rows: int, seq: int, half: int) -> tuple[np.ndarray, np.ndarray]:
        phi = rng.uniform(-3.0, 3.0, (rows, seq, half))
        return np.sin(phi), np.cos(phi)

    return [Sample((rng.normal(size=(2, 3, 2, 6)), *tables(1, 3, 3))),
            Sample((rng.normal(size=(2, 3, 2, 6)), *tables(2, 3, 2)), {"rotary_dim": 4})]


_ROTARY = OpDef("rotary_pos_embed", _infer, _rotate, _grad, samples=_samples,
                replicated=unchanged(_rotate), cost=per_output(3))
_TABLE_GRADS = OpDef(
    "rotary_pos_embed_table_grads", lambda dy, t, sin, cos, rotary_dim: (sin, cos), _table_grads,
    samples=lambda rng: [Sample((rng.normal(size=(2, 3, 2, 4)), rng.normal(size=(2, 3, 2, 4)),
                                 rng.normal(size=(1, 3, 2)), rng.normal(size=(1, 3, 2))),
                                {"rotary_dim": 4})],
    cost=per_output(4))


@register(_ROTARY)
def rotary_pos_embed(t: Tensor, sin: Tensor, cos: Tensor, rotary_dim: int | None = None
                     ) -> Tensor:
    """Rotate the interleaved feature pairs of ``t`` ``(batch, seq, heads, head_dim)`` by the
    angles whose ``sin`` and ``cos`` tables are ``(seq, rotary_dim/2)`` (or ``(1 or batch, seq,
    rotary_dim/2)``); the features past ``rotary_dim`` (default: all) pass through."""
    sin = sin.reshape((1, *sin.shape)) if sin.rank == 2 else sin
    cos = cos.reshape((1, *cos.shape)) if cos.rank == 2 else cos
    rotary_dim = int(t.shape[-1] if rotary_dim is None else rotary_dim) if t.rank else 0
    return apply1(_ROTARY, [t, sin, cos], {"rotary_dim": rotary_dim})


@register(_TABLE_GRADS)
def rotary_pos_embed_table_grads(dy: Tensor, t: Tensor, sin: Tensor, cos: Tensor,
                                 rotary_dim: int) -> tuple[Tensor, Tensor]:
    """The gradients of ``rotary_pos_embed``'s ``sin`` and ``cos`` tables."""
    return apply(_TABLE_GRADS, [dy, t, sin, cos], {"rotary_dim": int(rotary_dim)})
