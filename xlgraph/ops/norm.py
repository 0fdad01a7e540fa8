"""Normalisation: ``group_norm``, ``layer_norm`` and ``batch_norm_inference``.

Each has a fat gradient op with a hand-vectorised kernel that returns the gradients of all its
differentiable inputs at once (one node instead of a dozen primitives).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from xlgraph.errors import ShapeError
from xlgraph.op import OpDef, Sample, apply, apply1, register, same_dtype
from xlgraph.ops import loops
from xlgraph.ops.families import copied_out
from xlgraph.tensor import Tensor, TensorSpec


# -- group / layer norm kernels ----------------------------------------------------------------
def _layout(shape: tuple[int, ...], num_groups: int | None):
    """How to view data for statistics, the parameters' broadcast shape and the channel axis.

    ``num_groups`` None means layer norm: statistics and parameters over the last axis.
    """
    if num_groups is None:
        return (-1, 1, shape[-1]), (shape[-1],), len(shape) - 1
    return (shape[0], num_groups, -1), (shape[1],) + (1,) * (len(shape) - 2), 1


def _normalised(x: np.ndarray, view: tuple[int, ...], eps: float):
    """``(x - mean) / sqrt(var + eps)`` per group (in the grouped view) and ``1 / std``."""
    xg = x.reshape(view)
    xc = xg - xg.mean(axis=-1, keepdims=True)
    var = np.mean(xc * xc, axis=-1, keepdims=True)
    invstd = 1.0 / np.sqrt(var + eps)
    xc *= invstd
    return xc, invstd


def _norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, num_groups: int | None,
          eps: float, out: np.ndarray | None = None) -> np.ndarray:
    """The normalised data times ``w`` plus ``b``, into ``out`` when given."""
    view, wshape, _ = _layout(x.shape, num_groups)
    xhat, _ = _normalised(x, view, eps)
    y = xhat.reshape(x.shape)
    y = np.multiply(y, w.reshape(wshape), out=y if out is None else out)
    y += b.reshape(wshape)
    return y


def _norm_grad(dy: np.ndarray, x: np.ndarray, w: np.ndarray, num_groups: int | None,
               eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    view, wshape, channel = _layout(x.shape, num_groups)
    xhat, invstd = _normalised(x, view, eps)
    others = tuple(i for i in range(x.ndim) if i != channel)
    dw = np.sum(dy * xhat.reshape(x.shape), axis=others)
    db = np.sum(dy, axis=others)
    g = (dy * w.reshape(wshape)).reshape(xhat.shape)
    dx = g - g.mean(axis=-1, keepdims=True)
    dx -= xhat * np.mean(g * xhat, axis=-1, keepdims=True)
    dx *= invstd
    return dx.reshape(x.shape), dw, db


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    """``layer_norm`` into a fresh C-ordered array (declared to the lowering's layouts)."""
    return _norm(x, w, b, None, eps, out=np.empty(x.shape, x.dtype))


def _layer_norm_grad(dy: np.ndarray, x: np.ndarray, w: np.ndarray,
                     eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``layer_norm_grad`` as fresh C-ordered arrays (declared to the lowering's layouts)."""
    dx, dw, db = _norm_grad(dy, x, w, None, eps)
    return np.ascontiguousarray(dx), dw, db


# -- inference ---------------------------------------------------------------------------------
def _check_params(x: TensorSpec, size: int, *params: TensorSpec) -> None:
    same_dtype(x, *params)
    for p in params:
        if p.shape != (size,):
            raise ShapeError(f"parameters of {x} must have shape ({size},), got {p}")


def _group_norm_infer(x: TensorSpec, w: TensorSpec, b: TensorSpec, num_groups: int,
                      eps: float) -> TensorSpec:
    if len(x.shape) < 2 or num_groups < 1 or x.shape[1] % num_groups:
        raise ShapeError(f"need data (N, C, ...) with C divisible by num_groups={num_groups}, "
                         f"got {x}")
    _check_params(x, x.shape[1], w, b)
    return x


def _layer_norm_infer(x: TensorSpec, w: TensorSpec, b: TensorSpec, eps: float) -> TensorSpec:
    if not x.shape:
        raise ShapeError("layer_norm needs data of rank >= 1")
    _check_params(x, x.shape[-1], w, b)
    return x


def _norm_grad_infer(dy: TensorSpec, x: TensorSpec, w: TensorSpec, num_groups: int | None = None,
                     eps: float = 0.0) -> tuple[TensorSpec, ...]:
    same_dtype(dy, x, w)
    if dy.shape != x.shape:
        raise ShapeError(f"gradient {dy} does not match data {x}")
    return x, w, w


# -- batch norm (inference) --------------------------------------------------------------------
def _bn_shape(x: np.ndarray) -> tuple[int, ...]:
    return (x.shape[1],) + (1,) * (x.ndim - 2)


def _batch_norm(x, scale, bias, mean, var, epsilon):
    a = scale / np.sqrt(var + epsilon)
    y = x * a.reshape(_bn_shape(x))
    y += (bias - mean * a).reshape(_bn_shape(x))
    return y


def _batch_norm_grad(dy, x, scale, mean, var, epsilon):
    invstd = 1.0 / np.sqrt(var + epsilon)
    others = tuple(i for i in range(x.ndim) if i != 1)
    sum_dy = np.sum(dy, axis=others)
    centred = np.sum(dy * x, axis=others) - mean * sum_dy  # sum(dy * (x - mean))
    dx = dy * (scale * invstd).reshape(_bn_shape(x))
    dvar = centred * scale * (-0.5) * invstd * invstd * invstd
    return dx, centred * invstd, sum_dy, -sum_dy * scale * invstd, dvar


def _batch_norm_infer(x: TensorSpec, *params: TensorSpec, epsilon: float) -> TensorSpec:
    if len(x.shape) < 2:
        raise ShapeError(f"need data (N, C, ...), got {x}")
    _check_params(x, x.shape[1], *params)
    return x


def _batch_norm_grad_infer(dy: TensorSpec, x: TensorSpec, scale: TensorSpec, mean: TensorSpec,
                           var: TensorSpec, epsilon: float) -> tuple[TensorSpec, ...]:
    _batch_norm_infer(x, scale, mean, var, epsilon=epsilon)
    if dy != x:
        raise ShapeError(f"gradient {dy} does not match data {x}")
    return x, scale, scale, scale, scale


# -- samples -----------------------------------------------------------------------------------
def _normal(rng: np.random.Generator, *shapes: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    return tuple(rng.normal(size=s) for s in shapes)


def _group_norm_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample(_normal(rng, (2, 6, 3, 4), (6,), (6,)), {"num_groups": 3}),
            Sample(_normal(rng, (3, 4, 5), (4,), (4,)), {"num_groups": 4, "eps": 1e-3}),
            Sample(_normal(rng, (2, 4), (4,), (4,)), {"num_groups": 1})]


def _layer_norm_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample(_normal(rng, (3, 5), (5,), (5,))),
            Sample(_normal(rng, (2, 3, 4), (4,), (4,)), {"eps": 1e-2})]


def _bn_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample((*_normal(rng, (2, 3, 4, 5), (3,), (3,), (3,)), rng.uniform(0.5, 2, 3))),
            Sample((*_normal(rng, (4, 2), (2,), (2,), (2,)), rng.uniform(0.5, 2, 2)),
                   {"epsilon": 1e-3})]


def _bn_grad_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample((*_normal(rng, (2, 3, 4), (2, 3, 4), (3,), (3,)), rng.uniform(0.5, 2, 3)),
                   {"epsilon": 1e-5})]


# -- records and builders ----------------------------------------------------------------------
_GROUP_NORM_GRAD = OpDef(
    "group_norm_grad", _norm_grad_infer, _norm_grad,
    samples=lambda rng: [Sample(_normal(rng, (2, 6, 3), (2, 6, 3), (6,)),
                                {"num_groups": 2, "eps": 1e-5})], widen_half=True)
_GROUP_NORM = OpDef(
    "group_norm", _group_norm_infer, _norm,
    lambda g, dy: group_norm_grad(dy, g.x(0), g.x(1), **g.attrs), samples=_group_norm_samples,
    widen_half=True)


def _layer_norm_loop(kernel: Any) -> Any:
    """An ``OpDef.loop`` running ``kernel`` (``xlgraph.ops.loops``) on rows of a non-empty
    last axis."""
    def loop(ins: list[TensorSpec], eps: float) -> Any:
        if not ins[0].shape[-1]:
            return None
        return loops.float_only(ins[0], kernel, (eps, 1.0, ins[0].shape[-1]))

    return loop


_LAYER_NORM_GRAD = OpDef(
    "layer_norm_grad", _norm_grad_infer, _layer_norm_grad, kernel_out=copied_out(_layer_norm_grad),
    loop=_layer_norm_loop(loops.layer_norm_grad),
    samples=lambda rng: [Sample(_normal(rng, (3, 5), (3, 5), (5,)), {"eps": 1e-5})],
    widen_half=True, c_contiguous=True)
_LAYER_NORM = OpDef(
    "layer_norm", _layer_norm_infer, _layer_norm,
    lambda g, dy: layer_norm_grad(dy, g.x(0), g.x(1), **g.attrs), samples=_layer_norm_samples,
    kernel_out=partial(_norm, num_groups=None), loop=_layer_norm_loop(loops.layer_norm),
    widen_half=True, c_contiguous=True)
_BN_GRAD = OpDef("batch_norm_inference_grad", _batch_norm_grad_infer, _batch_norm_grad,
                 samples=_bn_grad_samples)
_BN = OpDef(
    "batch_norm_inference", _batch_norm_infer, _batch_norm,
    lambda g, dy: batch_norm_inference_grad(dy, g.x(0), g.x(1), g.x(3), g.x(4), **g.attrs),
    samples=_bn_samples)


@register(_GROUP_NORM_GRAD)
def group_norm_grad(dy: Tensor, x: Tensor, weight: Tensor, num_groups: int,
                    eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients of ``group_norm`` with respect to data, weight and bias."""
    attrs = {"num_groups": int(num_groups), "eps": float(eps)}
    dx, dw, db = apply(_GROUP_NORM_GRAD, [dy, x, weight], attrs)
    return dx, dw, db


@register(_LAYER_NORM_GRAD)
def layer_norm_grad(dy: Tensor, x: Tensor, weight: Tensor,
                    eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients of ``layer_norm`` with respect to data, weight and bias."""
    dx, dw, db = apply(_LAYER_NORM_GRAD, [dy, x, weight], {"eps": float(eps)})
    return dx, dw, db


@register(_BN_GRAD)
def batch_norm_inference_grad(dy: Tensor, x: Tensor, scale: Tensor, mean: Tensor, var: Tensor,
                              epsilon: float) -> tuple[Tensor, ...]:
    """Gradients of ``batch_norm_inference`` with respect to data, scale, bias, mean and var."""
    return apply(_BN_GRAD, [dy, x, scale, mean, var], {"epsilon": float(epsilon)})


@register(_GROUP_NORM)
def group_norm(t: Tensor, weight: Tensor, bias: Tensor, num_groups: int,
               eps: float = 1e-5) -> Tensor:
    """Group normalisation of ``(N, C, ...)`` data, then ``* weight + bias`` per channel.

    Statistics (mean, biased variance) are taken over each group of ``C / num_groups``
    channels and all remaining dims, per item.
    """
    return apply1(_GROUP_NORM, [t, weight, bias], {"num_groups": int(num_groups),
                                                   "eps": float(eps)})


@register(_LAYER_NORM)
def layer_norm(t: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    """Layer normalisation over the last axis, then ``* weight + bias`` (shape ``(H,)``).

    For 2-D ``(rows, H)`` data, the way PopXL programs use it, this equals PopXL's
    ``layer_norm`` (a one-group ``group_norm``). On higher ranks PopXL would normalise over
    every non-batch dim with parameters of ``t.shape[1]``; xlgraph normalises the last axis,
    like torch's ``layer_norm(t, (H,))``.
    """
    return apply1(_LAYER_NORM, [t, weight, bias], {"eps": float(eps)})


@register(_BN)
def batch_norm_inference(t: Tensor, scale: Tensor, bias: Tensor, mean: Tensor, var: Tensor,
                         epsilon: float = 1e-5, momentum: float = 0.9) -> Tensor:
    """Batch normalisation with given statistics, channel axis 1:
    ``(t - mean) / sqrt(var + epsilon) * scale + bias``.

    ``momentum`` is accepted for PopXL compatibility; inference does not update statistics.
    """
    return apply1(_BN, [t, scale, bias, mean, var], {"epsilon": float(epsilon)})
