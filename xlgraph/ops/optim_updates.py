"""Adam-family optimiser steps (PopART's AdamUpdater, AdamVarUpdate and LambSquare).

A step of Adam with learning rate ``lr`` is, per weight ``w`` with gradient ``g``::

    var_updates.accumulate_moving_average_(m, g, beta1)          # m = b1 m + (1 - b1) g
    var_updates.accumulate_moving_average_square_(v, g, beta2)   # v = b2 v + (1 - b2) g**2
    x = var_updates.adam_updater(m, v, w, step, weight_decay, beta1, beta2, eps)
    var_updates.adam_var_update(w, x, learning_rate=lr)          # w -= lr x

``adam_updater`` with ``weight_decay`` is decoupled weight decay (AdamW); for L2-regularised Adam
add ``weight_decay * w`` to ``g`` before accumulating instead. LAMB uses ``lamb_updater`` and passes
``lamb_square(w)`` and ``lamb_square(x)`` as ``r1`` and ``r2``. AdaMax accumulates
``v = max(beta2 v, |g|)`` (e.g. ``copy_var_update_(v, ops.maximum(v * beta2, ops.abs(g)))``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from xlgraph import dtypes
from xlgraph.errors import ShapeError
from xlgraph.op import OpDef, Sample, apply1, as_tensor, register
from xlgraph.ops.adam_loops import adam_loop
from xlgraph.ops.elementwise import add_
from xlgraph.tensor import Tensor, TensorSpec

__all__ = ["adam_updater", "lamb_updater", "adamax_updater", "adam_var_update", "lamb_square",
           "grad_reduce_square_add"]


def check_scalar(spec: TensorSpec, what: str) -> None:
    """Raise ShapeError unless ``spec`` has exactly one element."""
    if int(np.prod(spec.shape, dtype=np.int64)) != 1:
        raise ShapeError(f"{what} must have exactly one element, got {spec}")


def scalar(value: Any, like: Tensor) -> Tensor:
    """``value`` if it is a Tensor, else a constant of ``like``'s dtype."""
    return as_tensor(value, like)


# -- updaters ----------------------------------------------------------------------------------
# Inputs follow the builder's argument order, absent ones left out:
# [m, v, weight?, time_step?, weight_decay?, beta1?, beta2?, epsilon].
def _unpack(rest: tuple[Any, ...], mode: str, decay: bool, bias: bool) -> dict[str, Any]:
    names = (["weight"] if decay else []) + (["step"] if bias else []) + (
        ["wd"] if decay else []) + (["b1"] if bias else []) + (
        ["b2"] if bias and mode != "adamax" else []) + ["eps"]
    return dict(zip(names, rest))


def _updater_infer(m: TensorSpec, v: TensorSpec, *rest: TensorSpec, mode: str, decay: bool,
                   bias: bool) -> TensorSpec:
    parts = _unpack(rest, mode, decay, bias)
    weight = parts.pop("weight", None)
    if v.shape != m.shape or (weight is not None and weight.shape != m.shape):
        extra = f" and weight {weight}" if weight is not None else ""
        raise ShapeError(f"moments {m} and {v}{extra} must have one shape")
    for s in parts.values():
        check_scalar(s, "epsilon, weight_decay, time_step and the betas")
    # PopART's updater takes the weight's dtype, else the first moment's (a float16 weight with
    # float16 first and float32 second moments gives a float16 updater)
    return TensorSpec(m.shape, (weight or m).dtype)


def _updater(m: np.ndarray, v: np.ndarray, *rest: np.ndarray, mode: str, decay: bool,
             bias: bool) -> np.ndarray:
    """``m' / (f(v') + eps) + wd * w`` with ``f = sqrt`` (identity for adamax) and ``m'``,
    ``v'`` divided by ``1 - beta**step`` when ``bias`` (adamax corrects ``m`` only)."""
    p = _unpack(rest, mode, decay, bias)
    dtype = p["weight"].dtype if decay else m.dtype
    if bias:
        step = p["step"].item()
        m = m / (1.0 - p["b1"].item() ** step)
        if mode != "adamax":
            v = v / (1.0 - p["b2"].item() ** step)
    out = m / ((v if mode == "adamax" else np.sqrt(v)) + p["eps"].item())
    if decay:
        out += p["wd"].item() * p["weight"].astype(out.dtype, copy=False)
    return out.astype(dtype, copy=False)


def _updater_out(m: np.ndarray, v: np.ndarray, *rest: np.ndarray, out: np.ndarray,
                 scratch: tuple[np.ndarray], mode: str, decay: bool, bias: bool) -> np.ndarray:
    """``_updater`` into ``out``, the corrected ``v`` term in a scratch array: the kernel's
    operations in its order and dtypes (arrays of several dtypes: the kernel's result copied)."""
    p, tmp = _unpack(rest, mode, decay, bias), scratch[0]
    if not m.dtype == v.dtype == out.dtype == p.get("weight", out).dtype:
        np.copyto(out, _updater(m, v, *rest, mode=mode, decay=decay, bias=bias))
        return out
    if bias:
        step = p["step"].item()
        np.divide(m, 1.0 - p["b1"].item() ** step, out=out)
        if mode != "adamax":
            v = np.divide(v, 1.0 - p["b2"].item() ** step, out=tmp)
    else:
        np.copyto(out, m)
    v = v if mode == "adamax" else np.sqrt(v, out=tmp)
    np.add(v, p["eps"].item(), out=tmp)
    np.divide(out, tmp, out=out)
    if decay:
        out += np.multiply(p["weight"], p["wd"].item(), out=tmp)
    return out


def _updater_ref(m, v, *rest, mode, decay, bias):
    """The formulas in float64, from the time step *before* the op increments it."""
    p = {k: np.asarray(a, np.float64) for k, a in _unpack(rest, mode, decay, bias).items()}
    m, v = m.astype(np.float64), v.astype(np.float64)
    if bias:
        t = float(p["step"]) + 1.0
        m = m / (1 - math.pow(float(p["b1"]), t))
        v = v if mode == "adamax" else v / (1 - math.pow(float(p["b2"]), t))
    out = m / ((v if mode == "adamax" else np.sqrt(v)) + float(p["eps"]))
    return out + float(p["wd"]) * p["weight"] if decay else out


def _updater_samples(mode: str):
    def samples(rng: np.random.Generator) -> list[Sample]:
        m, v, w = rng.normal(size=(3, 4)), rng.uniform(0.1, 2.0, (3, 4)), rng.normal(size=(3, 4))
        betas = [np.array(0.9)] if mode == "adamax" else [np.array(0.9), np.array(0.99)]
        out = [Sample((m, v, w, np.array(3.0), np.array(0.01), *betas, np.array(1e-3))),
               Sample((m, v, None, np.array(6.0), None, *betas, np.array(1e-7)))]
        if mode != "adamax":
            out.append(Sample((m, v, None, None, None, None, None, np.array(1e-7))))
        return out

    return samples


def _updater_def(name: str, mode: str) -> OpDef:
    return OpDef(name, _updater_infer, _updater, ref=_updater_ref, kernel_out=_updater_out,
                 scratch=1, loop=adam_loop, samples=_updater_samples(mode), widen_half=True)


def _updater_builder(defn: OpDef, mode: str, m: Tensor, v: Tensor, weight: Tensor | None,
                     time_step: Tensor | None, weight_decay: Any, beta1: Any, beta2: Any,
                     epsilon: Any) -> Tensor:
    decay = weight_decay is not None and (isinstance(weight_decay, Tensor) or weight_decay != 0)
    if decay and weight is None:
        raise ValueError(f"{defn.name}: weight_decay needs the weight")
    if time_step is None and mode == "adamax":
        raise ValueError("adamax_updater needs time_step (AdaMax always corrects bias)")
    betas = [beta1] if mode == "adamax" else [beta1, beta2]
    if time_step is not None and any(b is None for b in betas):
        raise ValueError(f"{defn.name}: bias correction (time_step) needs beta1"
                         f"{'' if mode == 'adamax' else ' and beta2'}")
    bias = time_step is not None
    ins = [m, v] + ([weight] if decay else []) + ([add_(time_step, 1)] if bias else [])
    ins += ([scalar(weight_decay, m)] if decay else []) + (
        [scalar(b, m) for b in betas] if bias else [])
    return apply1(defn, [*ins, scalar(epsilon, m)], {"mode": mode, "decay": decay, "bias": bias})


_ADAM_UPDATER = _updater_def("adam_updater", "adam")
_LAMB_UPDATER = _updater_def("lamb_updater", "lamb")
_ADAMAX_UPDATER = _updater_def("adamax_updater", "adamax")


@register(_ADAM_UPDATER)
def adam_updater(acc_first_order: Tensor, acc_second_order: Tensor,
                 weight: Tensor | None = None, time_step: Tensor | None = None,
                 weight_decay: Any = None, beta1: Any = None, beta2: Any = None,
                 epsilon: Any = 1e-07) -> Tensor:
    """The Adam update term ``m' / (sqrt(v') + epsilon) + weight_decay * weight``.

    With ``time_step`` (a scalar tensor), the moments are bias-corrected: ``m' = m / (1 -
    beta1**t)``, ``v' = v / (1 - beta2**t)`` where ``t`` is ``time_step`` *after* this op adds 1
    to it in place (as PopART does: start it at 0, keep one per weight). Without ``time_step``,
    ``m' = m`` and ``v' = v``. ``weight_decay`` is decoupled (AdamW). Scalars may be numbers or
    scalar tensors.

    Raises:
        ValueError: ``weight_decay`` without ``weight``, or ``time_step`` without the betas.
    """
    return _updater_builder(_ADAM_UPDATER, "adam", acc_first_order, acc_second_order, weight,
                            time_step, weight_decay, beta1, beta2, epsilon)


@register(_LAMB_UPDATER)
def lamb_updater(acc_first_order: Tensor, acc_second_order: Tensor,
                 weight: Tensor | None = None, time_step: Tensor | None = None,
                 weight_decay: Any = None, beta1: Any = None, beta2: Any = None,
                 epsilon: Any = 1e-07) -> Tensor:
    """The LAMB update term: the same formula as ``adam_updater``; LAMB's trust ratio is
    applied by ``adam_var_update`` with ``r1``/``r2``."""
    return _updater_builder(_LAMB_UPDATER, "lamb", acc_first_order, acc_second_order, weight,
                            time_step, weight_decay, beta1, beta2, epsilon)


@register(_ADAMAX_UPDATER)
def adamax_updater(acc_first_order: Tensor, acc_second_order: Tensor,
                   weight: Tensor | None = None, time_step: Tensor | None = None,
                   weight_decay: Any = None, beta1: Any = 0.9,
                   epsilon: Any = 1e-07) -> Tensor:
    """The AdaMax update term ``m / (1 - beta1**t) / (u + epsilon) + weight_decay * weight``,
    ``u`` being the infinity-norm accumulator ``max(beta2 u, |g|)``. ``time_step`` is required
    and incremented in place as in ``adam_updater``."""
    return _updater_builder(_ADAMAX_UPDATER, "adamax", acc_first_order, acc_second_order,
                            weight, time_step, weight_decay, beta1, None, epsilon)


# -- the weight update -------------------------------------------------------------------------
def _var_update_infer(t: TensorSpec, x: TensorSpec, *rest: TensorSpec, lamb: bool,
                      clip: bool) -> TensorSpec:
    if x.shape != t.shape:
        raise ShapeError(f"the update term {x} must have the weight's shape {t}")
    for s in rest:
        check_scalar(s, "r1, r2, learning_rate and max_weight_norm")
    return t


def _lr_ratio(rest: tuple[Any, ...], lamb: bool, clip: bool) -> float:
    """``learning_rate`` times LAMB's ``phi(||w||) / ||x||``, from the inputs after ``t, x``:
    ``[r1, r2]`` (sums of squares; the ratio is 1 when either is 0) if ``lamb``, the learning
    rate, then ``max_weight_norm`` if ``clip``."""
    lr = float(rest[2 if lamb else 0])
    if not lamb:
        return lr
    r1, r2 = math.sqrt(float(rest[0])), math.sqrt(float(rest[1]))
    if clip:
        r1 = min(r1, float(rest[3]))
    return lr * (r1 / r2 if r1 != 0 and r2 != 0 else 1.0)


def _adam_var_update(t: np.ndarray, x: np.ndarray, *rest: np.ndarray, lamb: bool,
                     clip: bool) -> np.ndarray:
    t -= _lr_ratio(rest, lamb, clip) * x.astype(t.dtype, copy=False)
    return t


def _var_update_samples(rng: np.random.Generator) -> list[Sample]:
    t, x = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    r1, r2 = np.array(np.sum(t * t)), np.array(np.sum(x * x))
    lr = np.array(0.1)
    return [Sample((t, x, None, None, lr)),
            Sample((t, x, r1, r2, lr)),
            Sample((t, x, r1, r2, lr, np.array(0.5))),
            Sample((t, x, np.array(0.0), r2, lr))]


_ADAM_VAR_UPDATE = OpDef(
    "adam_var_update", _var_update_infer, _adam_var_update, inplace_of=0,
    ref=lambda t, x, *rest, lamb, clip: t - _lr_ratio(rest, lamb, clip) * x,
    samples=_var_update_samples, widen_half=True,
)


@register(_ADAM_VAR_UPDATE)
def adam_var_update(t: Tensor, x: Tensor, r1: Tensor | None = None, r2: Tensor | None = None,
                    learning_rate: Any = None, max_weight_norm: Any = None) -> Tensor:
    """In place ``t -= learning_rate * ratio * x`` for the update term ``x``.

    ``ratio`` is 1, or for LAMB (``r1`` and ``r2`` given: the sums of squares of the weight and
    of ``x``, e.g. from ``lamb_square``) ``min(sqrt(r1), max_weight_norm) / sqrt(r2)``, or 1 when
    either norm is 0. ``max_weight_norm`` None means no clipping.

    Raises:
        ValueError: without ``learning_rate``, or with only one of ``r1``/``r2``.
    """
    if learning_rate is None:
        raise ValueError("adam_var_update needs learning_rate")
    if (r1 is None) != (r2 is None):
        raise ValueError("adam_var_update: give both r1 and r2 (LAMB) or neither")
    lamb = r1 is not None
    clip = lamb and max_weight_norm is not None
    ins = [t, as_tensor(x, t)] + ([r1, r2] if lamb else []) + [scalar(learning_rate, t)]
    if clip:
        ins.append(scalar(max_weight_norm, t))
    return apply1(_ADAM_VAR_UPDATE, ins, {"lamb": lamb, "clip": clip})


def _lamb_square(x: np.ndarray) -> np.ndarray:
    x32 = x.astype(np.float32, copy=False)
    return np.asarray(np.sum(x32 * x32), np.float32)


_LAMB_SQUARE = OpDef(
    "lamb_square", lambda t: TensorSpec((), dtypes.float32), _lamb_square,
    ref=lambda x: np.sum(x.astype(np.float64) ** 2),
    samples=lambda rng: [Sample((rng.normal(size=(3, 4)),)), Sample((rng.normal(size=(7,)),))],
)


@register(_LAMB_SQUARE)
def lamb_square(t: Tensor) -> Tensor:
    """The sum of squares of every element of ``t``, as a float32 scalar (LAMB's r1/r2)."""
    return apply1(_LAMB_SQUARE, [t])


# -- popxl-addons' grad_reduce_square_add --------------------------------------------------------
def _square_add_infer(t: TensorSpec, *scale: TensorSpec, scale_value: float | None) -> TensorSpec:
    if scale:
        check_scalar(scale[0], "the loss-scaling factor")
    return TensorSpec((), dtypes.float32)


def _square_add(x: np.ndarray, *scale: np.ndarray, scale_value: float | None) -> np.ndarray:
    factor = np.float32(scale_value) if not scale else np.asarray(scale[0], np.float32)
    return np.asarray(_lamb_square(x) * factor.reshape(()), np.float32)


def _square_add_replicated(ctx: Any, x: np.ndarray, *scale: np.ndarray,
                           scale_value: float | None) -> np.ndarray:
    """Every replica's sum at once: squares summed in float32 over all but the replica axis."""
    x32 = x.astype(np.float32, copy=False)
    sums = np.sum(x32 * x32, axis=tuple(range(1, x.ndim)), dtype=np.float32)
    factor = np.float32(scale_value) if not scale else np.asarray(scale[0], np.float32)
    return (sums * factor.reshape(-1)).astype(np.float32)


_GRAD_REDUCE_SQUARE_ADD = OpDef(
    "grad_reduce_square_add", _square_add_infer, _square_add, replicated=_square_add_replicated,
    ref=lambda x, scale_value: np.sum(x.astype(np.float64) ** 2) * scale_value,
    samples=lambda rng: [Sample((rng.normal(size=(3, 4)), 2.0)),
                         Sample((rng.normal(size=(7,)), 0.5))],
)


@register(_GRAD_REDUCE_SQUARE_ADD)
def grad_reduce_square_add(t: Tensor, loss_scaling: Any) -> Tensor:
    """``sum(t^2) / loss_scaling^2`` over every element of ``t`` as a float32 scalar, summed
    in float32 (the square of the global norm of loss-scaled gradients, once summed over
    them). ``1 / loss_scaling^2`` is a float32 constant for a number, computed by ops for a
    tensor."""
    if isinstance(loss_scaling, Tensor):
        from xlgraph.ops.elementwise import cast, div

        ls = cast(loss_scaling, dtypes.float32)
        factor = div(as_tensor(1.0, ls), ls * ls)
        return apply1(_GRAD_REDUCE_SQUARE_ADD, [t, factor], {"scale_value": None})
    return apply1(_GRAD_REDUCE_SQUARE_ADD, [t],
                  {"scale_value": float(np.float32(1.0 / float(loss_scaling) ** 2))})
