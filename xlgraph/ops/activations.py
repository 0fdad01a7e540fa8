"""Activations: ``swish``/``swish_``, ``logsumexp`` and the xlgraph extras ``sigmoid`` and
``log_softmax`` (PopXL has neither; there log-softmax is ``x - logsumexp(x)``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from xlgraph.op import OpDef, Sample, apply1, normalize_axes, register, same_spec
from xlgraph.ops import loops, loss_loops
from xlgraph.ops.elementwise import exp
from xlgraph.ops.families import copied_out, inplace, reduction, unary
from xlgraph.ops.reduce import _keep
from xlgraph.tensor import Tensor, TensorSpec


def _grad_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample((rng.normal(size=(3, 4)), rng.uniform(-3, 3, (3, 4))))]


# -- sigmoid and swish -------------------------------------------------------------------------
def _sigmoid(x: np.ndarray) -> np.ndarray:
    """Logistic function via tanh: no overflow for large ``|x|``."""
    y = np.tanh(x * 0.5)
    y += 1
    y *= 0.5
    return y


def _sigmoid_grad(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    return dy * y * (1 - y)


def _swish(x: np.ndarray) -> np.ndarray:
    return x * _sigmoid(x)


def _swish_grad(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    s = _sigmoid(x)
    return dy * (s * (1 + x * (1 - s)))


_SIGMOID_GRAD = OpDef("sigmoid_grad", same_spec, _sigmoid_grad, elementwise=True,
                      samples=_grad_samples)
_SWISH_GRAD = OpDef("swish_grad", same_spec, _swish_grad, elementwise=True,
                    samples=_grad_samples)


@register(_SIGMOID_GRAD)
def sigmoid_grad(dy: Tensor, y: Tensor) -> Tensor:
    """Gradient of ``sigmoid`` given its output ``y``: ``dy * y * (1 - y)``."""
    return apply1(_SIGMOID_GRAD, [dy, y])


@register(_SWISH_GRAD)
def swish_grad(dy: Tensor, x: Tensor) -> Tensor:
    """Gradient of ``swish`` given its input ``x``."""
    return apply1(_SWISH_GRAD, [dy, x])


sigmoid = unary("sigmoid", _sigmoid, grad=lambda g, dy: (sigmoid_grad(dy, g.y(0)),),
                domain=(-4.0, 4.0), doc="Elementwise logistic sigmoid ``1 / (1 + exp(-t))`` "
                "(an xlgraph extra: PopXL has no sigmoid op).")
swish = unary("swish", _swish, grad=lambda g, dy: (swish_grad(dy, g.x(0)),),
              domain=(-4.0, 4.0), doc="Elementwise swish (SiLU) ``t * sigmoid(t)``.")
swish_ = inplace("swish")


# -- log-softmax -------------------------------------------------------------------------------
def _log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    y = x - np.max(x, axis=axis, keepdims=True)
    y -= np.log(np.sum(np.exp(y), axis=axis, keepdims=True))
    return y


def _log_softmax_grad(dy: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
    return dy - np.exp(y) * np.sum(dy, axis=axis, keepdims=True)


def _log_softmax_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample((rng.normal(size=(4, 5)),), {"axis": 1}),
            Sample((rng.normal(size=(2, 3, 4)) * 3,), {"axis": 0})]


def _log_softmax_grad_samples(rng: np.random.Generator) -> list[Sample]:
    y = _log_softmax(rng.normal(size=(4, 5)), 1)
    return [Sample((rng.normal(size=(4, 5)), y), {"axis": 1})]


def _rows_loop(fn: Any) -> Any:
    """The loop form ``fn`` of ``loss_loops`` for rows along the last axis."""
    def loop(ins: list[TensorSpec], axis: int) -> Any:
        shape = ins[-1].shape
        return loops.float_only(ins[-1], fn) if axis == len(shape) - 1 and shape[-1] else None

    return loop


_LOG_SOFTMAX_GRAD = OpDef("log_softmax_grad", same_spec, _log_softmax_grad,
                          kernel_out=copied_out(_log_softmax_grad),
                          loop=_rows_loop(loss_loops.log_softmax_grad_rows),
                          samples=_log_softmax_grad_samples, widen_half=True)
_LOG_SOFTMAX = OpDef("log_softmax", same_spec, _log_softmax,
                     lambda g, dy: (log_softmax_grad(dy, g.y(0), g.attrs["axis"]),),
                     kernel_out=copied_out(_log_softmax),
                     loop=_rows_loop(loss_loops.log_softmax_rows),
                     samples=_log_softmax_samples, widen_half=True)


@register(_LOG_SOFTMAX_GRAD)
def log_softmax_grad(dy: Tensor, y: Tensor, axis: int) -> Tensor:
    """Gradient of ``log_softmax`` given its output ``y``: ``dy - exp(y) * sum(dy, axis)``."""
    return apply1(_LOG_SOFTMAX_GRAD, [dy, y], {"axis": axis})


@register(_LOG_SOFTMAX)
def log_softmax(t: Tensor, axis: int) -> Tensor:
    """``log(softmax(t, axis))`` computed stably (an xlgraph extra; ``axis`` is required like
    softmax's). Feed it to ``nll_loss(..., log_prob=True)``."""
    return apply1(_LOG_SOFTMAX, [t], {"axis": normalize_axes(axis, t.rank)[0]})


# -- logsumexp ---------------------------------------------------------------------------------
def _logsumexp(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    m = np.max(x, axis=axis, keepdims=True)
    m[~np.isfinite(m)] = 0
    y = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))
    y += m
    return y if keepdims else np.squeeze(y, axis=axis)


logsumexp = reduction(
    "logsumexp", _logsumexp,
    grad=lambda g, dy: (_keep(g, dy) * exp(g.x(0) - _keep(g, g.y(0))),),
    doc="``log(sum(exp(t)))`` over ``axis`` (all axes when None), computed stably.")
