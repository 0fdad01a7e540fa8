"""Loop forms of the Adam step's ops for the compiled backend (``xlgraph.ops.loops``): the
moments' moving averages and the update term, each one vectorised pass over the variable
instead of numpy's three to six (the update term of a 8192 x 256 float32 weight: 2.5 against
14 ms of CPU, 2026-11-27).

Each does the numpy kernel's float operations in its order and dtype: the scalars (factors,
betas, the step count) are read as float64, combined as the kernel combines Python floats,
and rounded once to the arrays' dtype, as numpy rounds a Python float operand. Hence the same
bits as the numpy kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from xlgraph import dtypes
from xlgraph.ops.half_round import load, real, store, to_half_precision
from xlgraph.ops.loops import bits, float_only
from xlgraph.tensor import TensorSpec

__all__ = ["moving_average_loop", "adam_loop", "adam_step", "adam_step_loop", "corrections"]


@bits
def moving_average(t, x, f, out):  # noqa: ANN001, ANN201 - numba infers the types
    """``t f + x (1 - f)``; ``out`` may be ``t``."""
    ts, xs, outs = t.reshape(-1), x.reshape(-1), out.reshape(-1)
    fd = np.float64(load(f.reshape(-1), 0))
    keep, take = real(out, fd), real(out, 1.0 - fd)
    for i in range(ts.size):
        store(outs, i, load(ts, i) * keep + load(xs, i) * take)


@bits
def moving_average_square(t, x, f, out):  # noqa: ANN001, ANN201
    """``t f + x^2 (1 - f)``; ``out`` may be ``t``."""
    ts, xs, outs = t.reshape(-1), x.reshape(-1), out.reshape(-1)
    fd = np.float64(load(f.reshape(-1), 0))
    keep, take = real(out, fd), real(out, 1.0 - fd)
    for i in range(ts.size):
        xi = load(xs, i)
        store(outs, i, load(ts, i) * keep + (xi * xi) * take)


def corrections(out, step, b1, b2, eps):  # noqa: ANN001, ANN201
    """The update term's constants in ``out``'s arithmetic dtype: ``c = 1 - beta**step`` of
    both betas and epsilon (numba compiles it inline, ``backends.numba_backend``)."""
    t = np.float64(load(step.reshape(-1), 0))
    c1 = real(out, 1.0 - np.float64(load(b1.reshape(-1), 0)) ** t)
    c2 = real(out, 1.0 - np.float64(load(b2.reshape(-1), 0)) ** t)
    return c1, c2, real(out, load(eps.reshape(-1), 0))


@bits
def adam_term(m, v, step, b1, b2, eps, out):  # noqa: ANN001, ANN201
    """``(m / c1) / (sqrt(v / c2) + eps)`` with ``c = 1 - beta**step``."""
    ms, vs, outs = m.reshape(-1), v.reshape(-1), out.reshape(-1)
    c1, c2, e = corrections(out, step, b1, b2, eps)
    for i in range(ms.size):
        store(outs, i, (load(ms, i) / c1) / (np.sqrt(load(vs, i) / c2) + e))


@bits
def adam_term_decay(m, v, w, step, wd, b1, b2, eps, out):  # noqa: ANN001, ANN201
    """``adam_term`` plus ``wd w`` (decoupled weight decay, AdamW)."""
    ms, vs, ws, outs = m.reshape(-1), v.reshape(-1), w.reshape(-1), out.reshape(-1)
    c1, c2, e = corrections(out, step, b1, b2, eps)
    decay = real(out, load(wd.reshape(-1), 0))
    for i in range(ms.size):
        store(outs, i, (load(ms, i) / c1) / (np.sqrt(load(vs, i) / c2) + e)
              + decay * load(ws, i))


def adam_step(g, m, v, w, f1, f2, step, wd, b1, b2, eps,  # noqa: ANN001, ANN201, PLR0913
              m_out, v_out, w_out, a, b, decay, half_grad, half_term):
    """One Adam(W) step of a variable in one pass (``lower.adam_chains``): per element the
    operations of ``moving_average`` (``m``), ``moving_average_square`` (``v``), ``adam_term``
    (``adam_term_decay`` with ``decay``: ``wd`` is read only then) and ``loops.scaled_add``
    (``w_out = w a + term b``) in their order and dtype, so the four loops' bits; the update
    term is never stored. ``m_out``, ``v_out``, ``w_out`` are the arrays or spares of them.
    ``half_grad``: the first moment reads the gradient rounded to float16 (its cast);
    ``half_term``: the term is rounded to float16 before the update (a float16 term); float16
    arrays come as their bits (``loops.bits``)."""
    gs, ms, vs, ws = g.reshape(-1), m.reshape(-1), v.reshape(-1), w.reshape(-1)
    mo, vo, wo = m_out.reshape(-1), v_out.reshape(-1), w_out.reshape(-1)
    f = np.float64(load(f1.reshape(-1), 0))
    keep1, take1 = real(m_out, f), real(m_out, 1.0 - f)
    f = np.float64(load(f2.reshape(-1), 0))
    keep2, take2 = real(v_out, f), real(v_out, 1.0 - f)
    c1, c2, e = corrections(w_out, step, b1, b2, eps)
    k = real(w_out, load(wd.reshape(-1), 0))
    for i in range(gs.size):
        gi = load(gs, i)
        g1 = real(m_out, to_half_precision(np.float32(gi))) if half_grad else gi
        store(mo, i, load(ms, i) * keep1 + g1 * take1)
        store(vo, i, load(vs, i) * keep2 + (gi * gi) * take2)
        term = (load(mo, i) / c1) / (np.sqrt(load(vo, i) / c2) + e)
        if decay:
            term = term + k * load(ws, i)
        if half_term:
            term = real(w_out, to_half_precision(np.float32(term)))
        store(wo, i, load(ws, i) * a + term * b)


def _same(specs: list[TensorSpec]) -> bool:
    """One shape and one dtype for all of ``specs``."""
    return len({(s.shape, s.dtype) for s in specs}) == 1


def moving_average_loop(square: bool) -> Callable[..., Any]:
    """The ``OpDef.loop`` of ``accumulate_moving_average(_square)_``: an updater of the
    accumulator's shape (no broadcasting)."""
    fn = moving_average_square if square else moving_average

    def loop(ins: list[TensorSpec]) -> Any:
        return float_only(ins[0], fn) if _same(ins[:2]) else None

    return loop


def adam_loop(ins: list[TensorSpec], mode: str, decay: bool, bias: bool) -> Any:
    """The ``OpDef.loop`` of ``adam_updater``/``lamb_updater`` with bias correction, the
    moments (and weight) of one shape and dtype."""
    arrays = 3 if decay else 2
    if mode == "adamax" or not bias or not _same(ins[:arrays]):
        return None
    return float_only(ins[0], adam_term_decay if decay else adam_term)


def adam_step_loop(ins: list[TensorSpec], a: float, b: float, decay: bool,
                   half_grad: bool = False, half_term: bool = False) -> Any:
    """The loop form of one Adam chain (``lower.adam_chains``) on ``ins`` = the gradient,
    moments and weight: ``adam_step`` where all four have one shape and float dtype, or a
    float32 gradient and float32 or float16 state (given as its bits: ``uint16`` specs)."""
    state = {s.dtype for s in ins[1:4]} - {ins[0].dtype}  # float16 state: as its bits
    if len({s.shape for s in ins[:4]}) != 1 or not state <= {dtypes.uint16} or (
            (half_grad or half_term or state) and ins[0].dtype != dtypes.float32):
        return None
    return float_only(ins[0], adam_step, (a, b), (int(decay), int(half_grad), int(half_term)))
