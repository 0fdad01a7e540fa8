"""Connectionist temporal classification loss (``ctc_loss``) and its gradient."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from xlgraph.errors import ShapeError
from xlgraph.op import OpDef, Sample, apply1, register
from xlgraph.ops.indexing import check_int_indices
from xlgraph.tensor import Tensor, TensorSpec

__all__ = ["ctc_loss"]


def _infer(lp: TensorSpec, targets: TensorSpec, in_lens: TensorSpec, tgt_lens: TensorSpec,
           blank: int) -> TensorSpec:
    for spec, what in ((targets, "targets"), (in_lens, "input_lengths"),
                       (tgt_lens, "target_lengths")):
        check_int_indices(spec, what)
    if len(lp.shape) != 3 or len(targets.shape) != 2 or targets.shape[0] != lp.shape[1] \
            or in_lens.shape != (lp.shape[1],) or tgt_lens.shape != (lp.shape[1],):
        raise ShapeError(f"ctc_loss needs log_probs (T, N, C), targets (N, S) and lengths (N,); "
                         f"got {lp}, {targets}, {in_lens}, {tgt_lens}")
    return TensorSpec((lp.shape[1],), lp.dtype)


def _extended(target: np.ndarray, blank: int) -> np.ndarray:
    """``blank, t1, blank, t2, ..., blank``."""
    ext = np.full(2 * len(target) + 1, blank, np.int64)
    ext[1::2] = target
    return ext


def _logadd(*xs: np.ndarray) -> np.ndarray:
    stacked = np.stack(xs)
    top = stacked.max(0)
    safe = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        total = safe + np.log(np.exp(stacked - safe).sum(0))
    return np.where(np.isfinite(top), total, -np.inf)


def _skip(ext: np.ndarray, blank: int) -> np.ndarray:
    """Where the path may jump two states (a label differing from the one two back)."""
    allowed = np.zeros(len(ext), bool)
    allowed[2:] = (ext[2:] != blank) & (ext[2:] != ext[:-2])
    return allowed


def _alpha_beta(lp: np.ndarray, ext: np.ndarray, blank: int) -> tuple[np.ndarray, np.ndarray]:
    """Forward and backward log variables of one sequence, ``lp`` (T, C); both include the
    emission at their own step."""
    steps, states = lp.shape[0], len(ext)
    emit = lp[:, ext]  # (T, S')
    skip = _skip(ext, blank)
    alpha = np.full((steps, states), -np.inf)
    alpha[0, :2] = emit[0, :2]
    for t in range(1, steps):
        prev = alpha[t - 1]
        one = np.concatenate([[-np.inf], prev[:-1]])
        two = np.where(skip, np.concatenate([[-np.inf, -np.inf], prev[:-2]]), -np.inf)
        alpha[t] = _logadd(prev, one, two) + emit[t]
    beta = np.full((steps, states), -np.inf)
    beta[-1, -2:] = emit[-1, -2:]
    skip_back = np.concatenate([skip[2:], [False, False]])
    for t in range(steps - 2, -1, -1):
        nxt = beta[t + 1]
        one = np.concatenate([nxt[1:], [-np.inf]])
        two = np.where(skip_back, np.concatenate([nxt[2:], [-np.inf, -np.inf]]), -np.inf)
        beta[t] = _logadd(nxt, one, two) + emit[t]
    return alpha, beta


def _sequences(lp: np.ndarray, targets: np.ndarray, in_lens: np.ndarray,
               tgt_lens: np.ndarray) -> Any:
    for n in range(lp.shape[1]):
        yield n, lp[: int(in_lens[n]), n].astype(np.float64), targets[n, : int(tgt_lens[n])]


def _ctc(lp: np.ndarray, targets: np.ndarray, in_lens: np.ndarray, tgt_lens: np.ndarray,
         blank: int) -> np.ndarray:
    out = np.empty(lp.shape[1], lp.dtype)
    for n, seq, target in _sequences(lp, targets, in_lens, tgt_lens):
        ext = _extended(target, blank)
        alpha, _ = _alpha_beta(seq, ext, blank)
        out[n] = -_logadd(*alpha[-1, -2:]) if len(ext) > 1 else -alpha[-1, -1]
    return out


def _ctc_grad(dy: np.ndarray, lp: np.ndarray, targets: np.ndarray, in_lens: np.ndarray,
              tgt_lens: np.ndarray, blank: int) -> np.ndarray:
    """d loss / d log_probs: ``-exp(log sum of alpha beta over the states emitting c, less the
    double-counted emission, plus the loss)``; zero past each input length."""
    grad = np.zeros(lp.shape, np.float64)
    for n, seq, target in _sequences(lp, targets, in_lens, tgt_lens):
        ext = _extended(target, blank)
        alpha, beta = _alpha_beta(seq, ext, blank)
        nll = -_logadd(*alpha[-1, -2:]) if len(ext) > 1 else -alpha[-1, -1]
        both = alpha + beta  # (T, S')
        for c in np.unique(ext):
            lcab = _logadd(*both[:, ext == c].T)
            grad[: len(seq), n, c] = -np.exp(lcab + nll - seq[:, c])
        grad[:, n] *= dy[n]
    return grad.astype(lp.dtype)


def _ctc_ref(lp: np.ndarray, targets: np.ndarray, in_lens: np.ndarray, tgt_lens: np.ndarray,
             blank: int) -> np.ndarray:
    """Every alignment of every sequence enumerated (tiny sizes only)."""
    out = np.empty(lp.shape[1], lp.dtype)
    for n, seq, target in _sequences(lp, targets, in_lens, tgt_lens):
        total = -np.inf
        for path in itertools.product(range(lp.shape[2]), repeat=len(seq)):
            collapsed = [k for i, k in enumerate(path) if i == 0 or k != path[i - 1]]
            if [k for k in collapsed if k != blank] == list(target):
                total = np.logaddexp(total, sum(seq[t, k] for t, k in enumerate(path)))
        out[n] = -total
    return out


def _samples(rng: np.random.Generator) -> list[Sample]:
    logits = rng.normal(size=(5, 2, 3))
    lp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    targets = np.array([[1, 2], [2, 2]], np.int32)
    return [Sample((lp, targets, np.array([5, 4], np.int32), np.array([2, 1], np.int32)),
                   {"blank": 0})]


def _grad_infer(dy: TensorSpec, lp: TensorSpec, *rest: TensorSpec, blank: int) -> TensorSpec:
    return lp


def _grad_samples(rng: np.random.Generator) -> list[Sample]:
    (sample,) = _samples(rng)
    return [Sample((rng.normal(size=2), *sample.args), sample.kwargs, grad=False)]


_CTC_GRAD = OpDef("ctc_loss_grad", _grad_infer, _ctc_grad, samples=_grad_samples)
ctc_loss_grad = register(_CTC_GRAD)(
    lambda dy, lp, t, il, tl, blank: apply1(_CTC_GRAD, [dy, lp, t, il, tl], {"blank": blank}))

_CTC = OpDef(
    "ctc_loss", _infer, _ctc,
    lambda g, dy: (ctc_loss_grad(dy, g.x(0), g.x(1), g.x(2), g.x(3), g.attrs["blank"]),
                   None, None, None),
    samples=_samples, ref=_ctc_ref,
)


@register(_CTC)
def ctc_loss(log_probs: Tensor, targets: Tensor, input_lengths: Tensor, target_lengths: Tensor,
             blank: int = 0) -> Tensor:
    """Per-sequence CTC loss ``-log p(target | log_probs)`` (no reduction).

    Args:
        log_probs: (T, N, C) log-probabilities over C classes (blank included).
        targets: (N, S) int labels, padded; only the first ``target_lengths[n]`` count.
        input_lengths: (N,) time steps used per sequence.
        target_lengths: (N,) labels per sequence.
        blank: the blank class.

    An impossible alignment gives ``inf``. The gradient is with respect to ``log_probs``.
    """
    return apply1(_CTC, [log_probs, targets, input_lengths, target_lengths],
                  {"blank": int(blank)})
