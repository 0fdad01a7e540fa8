"""Neural-network ops: softmax, negative log-likelihood losses, onehot."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from xlgraph import dtypes
from xlgraph.errors import DTypeError, ShapeError, whole_number
from xlgraph.op import OpDef, Sample, apply, apply1, normalize_axes, register, same_spec
from xlgraph.ops import loops, loss_loops, softmax_loops
from xlgraph.ops.families import copied_out
from xlgraph.ops.replicas import held_once, shift_axes
from xlgraph.tensor import Constant, Tensor, TensorSpec


# -- softmax -----------------------------------------------------------------------------------
def _softmax_out(x: np.ndarray, axis: int, out: np.ndarray) -> np.ndarray:
    """``softmax`` into ``out`` (which may be ``x``); only the row reductions allocate."""
    np.subtract(x, np.maximum.reduce(x, axis, keepdims=True), out=out)
    np.exp(out, out=out)
    return np.true_divide(out, np.add.reduce(out, axis, keepdims=True), out=out)


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    return _softmax_out(x, axis, np.empty(x.shape, x.dtype))


def _softmax_grad(dy: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
    dot = np.sum(dy * y, axis=axis, keepdims=True)
    return y * (dy - dot)


def _softmax_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample((rng.normal(size=(4, 5)),), {"axis": 1}),
            Sample((rng.normal(size=(2, 3, 4)),), {"axis": 0})]


def _softmax_loop(x: TensorSpec, axis: int) -> Any:
    """float32 along the last axis: the vectorised rows loop; else the general loop."""
    if axis == len(x.shape) - 1 and x.dtype is dtypes.float32 and x.shape[-1]:
        return loops.float_only(x, softmax_loops.softmax_rows32)
    return loops.float_only(x, softmax_loops.softmax, ints=(axis,))


def _softmax_grad_loop(ins: list[TensorSpec], axis: int) -> Any:
    """Rows along a non-empty last axis."""
    shape = ins[1].shape
    if axis != len(shape) - 1 or not shape[-1]:
        return None
    return loops.float_only(ins[1], softmax_loops.softmax_grad_rows)


_SOFTMAX_GRAD = OpDef(
    "softmax_grad", same_spec, _softmax_grad, replicated=shift_axes(_softmax_grad, "axis"),
    kernel_out=copied_out(_softmax_grad), loop=_softmax_grad_loop,
    widen_half=True,
    samples=lambda rng: [Sample((rng.normal(size=(4, 5)), rng.dirichlet(np.ones(5), 4)),
                                {"axis": 1})],
)
_SOFTMAX = OpDef("softmax", same_spec, _softmax,
                 lambda g, dy: (softmax_grad(dy, g.y(0), g.attrs["axis"]),),
                 samples=_softmax_samples, kernel_out=_softmax_out,
                 replicated=shift_axes(_softmax, "axis"),
                 loop=lambda ins, axis: _softmax_loop(ins[0], axis), widen_half=True)


@register(_SOFTMAX_GRAD)
def softmax_grad(dy: Tensor, y: Tensor, axis: int) -> Tensor:
    """Gradient of softmax given its output ``y``."""
    return apply1(_SOFTMAX_GRAD, [dy, y], {"axis": axis})


@register(_SOFTMAX)
def softmax(t: Tensor, axis: int) -> Tensor:
    """Softmax along ``axis`` (required, as in PopXL)."""
    return apply1(_SOFTMAX, [t], {"axis": normalize_axes(axis, t.rank)[0]})


# -- negative log-likelihood -------------------------------------------------------------------
def _check_nll(probs: TensorSpec, labels: TensorSpec, flat: bool = False) -> None:
    """Integer labels, shaped ``probs.shape[:-1]`` (PopART's ``NllOp``); with ``flat`` any
    shape of as many items (``NlllWithSoftmaxGradDirectOp`` flattens both)."""
    if not labels.dtype.is_int:
        raise DTypeError(f"labels must be integers, got {labels}")
    if flat and math.prod(labels.shape) == math.prod(probs.shape[:-1]):
        return
    if probs.shape[:-1] != labels.shape:
        want = f"{math.prod(probs.shape[:-1])} items" if flat else str(probs.shape[:-1])
        raise ShapeError(f"The label tensor ({labels}) must have shape {want} to match all but "
                         f"the final dimension of the probabilities tensor ({probs})")


def _nll_parts(probs: np.ndarray, labels: np.ndarray, ignore_index: int | None):
    """Flattened probs, labels, the mask of counted items and how many there are."""
    p = probs.reshape(-1, probs.shape[-1])
    lab = labels.reshape(-1).astype(np.intp)
    keep = None if ignore_index is None else lab != ignore_index
    safe = lab if keep is None else np.where(keep, lab, 0)
    classes = p.shape[-1]
    bad = (safe < 0) | (safe >= classes)
    if bad.any():  # a negative label would silently pick a class from the end
        raise IndexError(f"label {lab[bad][0]} is out of range for {classes} classes (labels "
                         f"must be in [0, {classes}) or equal ignore_index={ignore_index})")
    count = lab.size if keep is None else int(keep.sum())
    return p, safe, keep, count


def _reduce(per_item: np.ndarray, reduction: str, count: int, shape: tuple[int, ...]):
    if reduction == "none":
        return per_item.reshape(shape)
    total = per_item.sum(dtype=per_item.dtype)
    return total / max(count, 1) if reduction == "mean" else total


def _nll_loss(probs, labels, ignore_index, reduction, log_prob):
    parts = _nll_parts(probs, labels, ignore_index)
    return _nll_of_parts(parts, np.arange(parts[1].size), probs, labels, reduction, log_prob)


def _nll_of_parts(parts, rows, probs, labels, reduction, log_prob):
    p, lab, keep, count = parts
    picked = p[rows, lab]
    per_item = -picked if log_prob else -np.log(picked)
    if keep is not None:
        per_item = np.where(keep, per_item, 0).astype(probs.dtype)
    return np.asarray(_reduce(per_item, reduction, count, labels.shape), probs.dtype)


def _nll_loss_grad(dy, probs, labels, ignore_index, reduction, log_prob):
    p, lab, keep, count = _nll_parts(probs, labels, ignore_index)
    rows = np.arange(lab.size)
    scale = np.broadcast_to(dy, labels.shape).reshape(-1) if reduction == "none" else np.full(
        lab.size, dy / max(count, 1) if reduction == "mean" else dy, probs.dtype)
    if keep is not None:
        scale = scale * keep
    grad = np.zeros_like(p)
    grad[rows, lab] = -scale if log_prob else -scale / p[rows, lab]
    return grad.reshape(probs.shape)


def _nll_infer(probs: TensorSpec, labels: TensorSpec, ignore_index: Any, reduction: str,
               log_prob: bool, flat: bool = False) -> TensorSpec:
    _check_nll(probs, labels, flat)
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    return TensorSpec(labels.shape if reduction == "none" else (), probs.dtype)


def _nll_grad_infer(dy: TensorSpec, probs: TensorSpec, labels: TensorSpec, **_: Any) -> TensorSpec:
    return probs


def _probs_labels(rng: np.random.Generator, n: int = 6, c: int = 4) -> tuple[Any, Any]:
    return rng.dirichlet(np.ones(c), n) * 0.9 + 0.1 / c, rng.integers(0, c, n).astype(np.int32)


def _nll_samples(rng: np.random.Generator) -> list[Sample]:
    p, lab = _probs_labels(rng)
    base = {"ignore_index": None, "reduction": "mean", "log_prob": False}
    return [Sample((p, lab), base),
            Sample((p, lab), {**base, "reduction": "sum", "ignore_index": int(lab[0])}),
            Sample((np.log(p), lab), {**base, "reduction": "none", "log_prob": True})]


def _nll_grad_rule(g: Any, dy: Tensor) -> tuple[Any, None]:
    return nll_loss_grad(dy, g.x(0), g.x(1), **g.attrs), None


def _nll_grad_replicated(ctx: Any, dy, probs, labels, ignore_index, reduction, log_prob):
    """All replicas in one call: per item as it is, and for a mean or sum over each replica's
    items (without ``ignore_index``) as a sum whose gradient seed is already divided."""
    if probs.shape[0] != labels.shape[0]:
        return None  # one of them is held once
    if reduction == "none":
        return _nll_loss_grad(dy, probs, labels, ignore_index, reduction, log_prob)
    if ignore_index is not None or not held_once(dy):
        return None
    count = math.prod(labels.shape[1:])
    seed = dy[0] / max(count, 1) if reduction == "mean" else dy[0]
    return _nll_loss_grad(seed, probs, labels, None, "sum", log_prob)


def _nll_loop(fn: Any, probs: TensorSpec, ignore_index: int | None, reduction: str,
              log_prob: bool) -> Any:
    """``loss_loops.nll_loss_rows``/``nll_loss_grad_rows`` for a mean or a sum."""
    if reduction == "none":
        return None
    ignore = 0 if ignore_index is None else int(ignore_index)
    flags = (ignore, int(ignore_index is not None), int(reduction == "mean"), int(log_prob))
    return loops.float_only(probs, fn, (1.0,), ints=flags)


def _nll_grad_samples(rng: np.random.Generator) -> list[Sample]:
    p, lab = _probs_labels(rng)
    base = {"ignore_index": None, "reduction": "mean", "log_prob": False}
    return [Sample((np.array(1.3), p, lab), base),
            Sample((np.array(0.7), np.log(p), lab),
                   {**base, "reduction": "sum", "ignore_index": int(lab[0]), "log_prob": True}),
            Sample((np.array(1.1), np.log(p), lab), {**base, "log_prob": True})]


_NLL_GRAD = OpDef(
    "nll_loss_grad", _nll_grad_infer, _nll_loss_grad, replicated=_nll_grad_replicated,
    kernel_out=copied_out(_nll_loss_grad), samples=_nll_grad_samples,
    loop=lambda ins, **attrs: None if ins[0].dtype != ins[1].dtype else _nll_loop(
        loss_loops.nll_loss_grad_rows, ins[1], **attrs), widen_half=True)
_NLL = OpDef("nll_loss", _nll_infer, _nll_loss, _nll_grad_rule, samples=_nll_samples,
             kernel_out=copied_out(_nll_loss),
             loop=lambda ins, **attrs: _nll_loop(loss_loops.nll_loss_rows, ins[0], **attrs),
             widen_half=True)


@register(_NLL_GRAD)
def nll_loss_grad(dy: Tensor, probs: Tensor, labels: Tensor, ignore_index: int | None = None,
                  reduction: str = "mean", log_prob: bool = False) -> Tensor:
    """Gradient of ``nll_loss`` with respect to ``probs``."""
    attrs = {"ignore_index": ignore_index, "reduction": reduction, "log_prob": log_prob}
    return apply1(_NLL_GRAD, [dy, probs, labels], attrs)


@register(_NLL)
def nll_loss(probs: Tensor, labels: Tensor, ignore_index: int | None = None,
             reduction: str = "mean", log_prob: bool = False) -> Tensor:
    """Negative log-likelihood of ``labels`` under ``probs`` (log-probabilities if ``log_prob``).

    ``mean`` divides by the number of items whose label is not ``ignore_index``.
    """
    attrs = {"ignore_index": ignore_index, "reduction": _reduction_name(reduction),
             "log_prob": bool(log_prob)}
    return apply1(_NLL, [probs, labels], attrs)


def _reduction_name(reduction: Any) -> Any:
    """PopXL's reduction string, also from PopART's ``ReductionType`` (its value)."""
    return getattr(reduction, "value", reduction)


def _nll_softmax_infer(probs, labels, loss_grad, ignore_index, reduction):
    loss = _nll_infer(probs, labels, ignore_index, reduction, False, flat=True)
    return loss, probs


def _nll_softmax_out(probs, labels, loss_grad, ignore_index, reduction, out):
    """``nll_loss_with_softmax_grad`` into ``out = (loss, d_logits)``."""
    loss_out, grad_out = out
    parts = p, lab, keep, count = _nll_parts(probs, labels, ignore_index)
    rows = np.arange(lab.size)
    if keep is None and reduction != "none":  # the common case, in fewer numpy calls
        picked = np.log(p[rows, lab])
        total = np.negative(np.add.reduce(picked))
        loss_out[...] = total / count if reduction == "mean" else total
    else:
        np.copyto(loss_out, _nll_of_parts(parts, rows, probs, labels, reduction, False))
    scale = loss_grad / max(count, 1) if reduction == "mean" else loss_grad
    scale = np.asarray(scale, grad_out.dtype)  # what numpy casts the float to anyway, once
    grad = grad_out.reshape(p.shape)
    np.multiply(p, scale, out=grad)
    grad[rows, lab] -= scale
    if keep is not None:
        grad *= keep[:, None]
    return loss_out, grad_out


def _nll_softmax(probs, labels, loss_grad, ignore_index, reduction):
    loss_shape = labels.shape if reduction == "none" else ()
    out = (np.empty(loss_shape, probs.dtype), np.empty(probs.shape, probs.dtype))
    return _nll_softmax_out(probs, labels, loss_grad, ignore_index, reduction, out)


def _nll_softmax_loop(ins: list[TensorSpec], loss_grad: float, ignore_index: int | None,
                      reduction: str) -> Any:
    """The loop form without ``ignore_index``, for the mean and the sum."""
    consts = softmax_loops.nll_scale(ins[1], loss_grad, ignore_index, reduction)
    return None if consts is None else loops.float_only(ins[0], loops.nll_softmax, consts)


def _nll_softmax_replicated(ctx: Any, probs, labels, loss_grad, ignore_index, reduction):
    """All replicas in one call (without ``ignore_index``): the loss of each replica sums its
    own row, the gradient is per item."""
    if probs.shape[0] != labels.shape[0]:
        return None  # one of them is held once
    if reduction == "none":
        return _nll_softmax(probs, labels, loss_grad, ignore_index, reduction)
    if ignore_index is not None:
        return None
    count = math.prod(labels.shape[1:])
    p, lab, _, _ = _nll_parts(probs, labels, None)
    rows = np.arange(lab.size)
    total = np.negative(np.add.reduce(np.log(p[rows, lab]).reshape(len(probs), -1), axis=1))
    loss = total / count if reduction == "mean" else total
    scale = np.asarray(loss_grad / max(count, 1) if reduction == "mean" else loss_grad, p.dtype)
    grad = np.multiply(p, scale)
    grad[rows, lab] -= scale
    return loss.astype(probs.dtype, copy=False), grad.reshape(probs.shape)


_NLL_SOFTMAX = OpDef(
    "nll_loss_with_softmax_grad", _nll_softmax_infer, _nll_softmax, kernel_out=_nll_softmax_out,
    loop=_nll_softmax_loop, replicated=_nll_softmax_replicated, widen_half=True,
    samples=lambda rng: [
        Sample(_probs_labels(rng), {"loss_grad": 1.0, "ignore_index": None, "reduction": "mean"}),
        Sample((_probs_labels(rng)[0], _probs_labels(rng)[1].reshape(2, 3)),  # flattened labels
               {"loss_grad": 2.0, "ignore_index": None, "reduction": "none"})],
)


@register(_NLL_SOFTMAX)
def nll_loss_with_softmax_grad(probs: Tensor, labels: Tensor, loss_grad: float = 1,
                               ignore_index: int | None = None,
                               reduction: str = "mean") -> tuple[Tensor, Tensor]:
    """NLL loss of softmax ``probs`` and its gradient with respect to the pre-softmax logits.

    ``labels`` may have any shape of ``prod(probs.shape[:-1])`` items (PopART flattens probs
    to ``[N, C]`` and labels to ``[N]``); the loss has probs' dtype, and labels' shape with
    ``reduction="none"``.

    Returns:
        ``(loss, d_logits)`` where ``d_logits = (probs - onehot(labels)) * loss_grad / N``.
    """
    attrs = {"loss_grad": float(loss_grad), "ignore_index": ignore_index,
             "reduction": _reduction_name(reduction)}
    loss, grad = apply(_NLL_SOFTMAX, [probs, labels], attrs)
    return loss, grad


# -- onehot ------------------------------------------------------------------------------------
def _onehot_infer(t: TensorSpec, values: TensorSpec, num_classes: int, axis: int) -> TensorSpec:
    if not t.dtype.is_int:
        raise DTypeError(f"indices must be integers, got {t}")
    if values.shape != (2,):
        raise ShapeError(f"values must have shape (2,) [off, on], got {values}")
    shape = list(t.shape)
    shape.insert(axis if axis >= 0 else len(shape) + 1 + axis, num_classes)
    return TensorSpec(tuple(shape), values.dtype)


def _onehot(x: np.ndarray, values: np.ndarray, num_classes: int, axis: int) -> np.ndarray:
    hot = x[..., None] == np.arange(num_classes)
    out = np.where(hot, values[1], values[0]).astype(values.dtype)
    return np.moveaxis(out, -1, axis)


_ONEHOT = OpDef(
    "onehot", _onehot_infer, _onehot,
    samples=lambda rng: [Sample((rng.integers(0, 4, (5,)).astype(np.int32), 4,
                                 np.array([-0.5, 2.0])), {"axis": 0})],
)


@register(_ONEHOT)
def onehot(t: Tensor, num_classes: Any, values: Any, axis: int = -1) -> Tensor:
    """One-hot encode the indices ``t``; ``values`` is ``[off, on]``.

    ``num_classes`` may be an int or a constant tensor (it fixes the output shape).
    """
    if isinstance(num_classes, Tensor):
        if not isinstance(num_classes, Constant):
            raise ValueError(f"onehot: num_classes {num_classes.id} must be a constant")
        num_classes = num_classes.data
    if not isinstance(values, Tensor):
        from xlgraph.tensor import constant

        values = constant(np.asarray(values, np.float32), dtypes.float32)
    classes = whole_number(num_classes.item() if isinstance(num_classes, np.ndarray)
                           else num_classes, "onehot num_classes")
    return apply1(_ONEHOT, [t, values], {"num_classes": classes, "axis": int(axis)})
