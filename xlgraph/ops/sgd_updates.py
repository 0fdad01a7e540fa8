"""Stochastic gradient descent as two fused in-place updates (``torch.optim.SGD``'s step).

One step of torch's SGD with learning rate ``lr``, momentum ``m``, dampening ``d``, L2 weight
decay ``wd`` and Nesterov momentum, on weight ``w`` with gradient ``g`` and momentum buffer ``v``::

    v = sgd_momentum_(v, g, w, step, momentum=m, dampening=d, weight_decay=wd)
    sgd_update_(w, v, lr)                                  # momentum
    sgd_update_(w, g, lr, v, momentum=m, weight_decay=wd)  # Nesterov momentum
    sgd_update_(w, g, lr, weight_decay=wd)                 # no momentum

``sgd_momentum_`` is ``v = m v + c (g + wd w)`` with ``c = 1 - d``, except at ``step == 1``
where the gradient enters undamped (torch starts the buffer at the gradient; the buffer starts
at zero here); ``w`` is an input only with weight decay and ``step`` only with dampening.
``sgd_update_`` is ``w = w - lr D`` with ``D = x + wd w + m v``, each term only when given.

Both do the float operations of the separate ops they replace, in the same order (``w * wd``,
``g + .``, ``. * c``, ``v * m``, their sum, ``lr * D``, ``w - .``), so every backend gives the
bits of the unfused update. Each is one pass over its arrays as a compiled loop, and, written
through ``kernel_out``, may go to the variable's spare array (no per-run snapshot).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xlgraph.cost import per_output
from xlgraph.errors import ShapeError
from xlgraph.op import OpDef, Sample, apply1, as_tensor, register, same_dtype
from xlgraph.ops.half_round import load, store
from xlgraph.ops.loops import bits, float_only
from xlgraph.ops.optim_updates import check_scalar
from xlgraph.tensor import Tensor, TensorSpec

__all__ = ["sgd_momentum_", "sgd_update_"]


def _check(t: TensorSpec, same: list[TensorSpec], scalar: TensorSpec | None,
           what: str) -> TensorSpec:
    """``t``, after checking that ``same`` have its spec and ``scalar`` (``what``: the learning
    rate, the step count) its dtype and one element."""
    for x in same:
        same_dtype(t, x)
        if x.shape != t.shape:
            raise ShapeError(f"{x} must have the updated tensor's shape {t}")
    if scalar is not None:
        same_dtype(t, scalar)
        check_scalar(scalar, what)
    return t


# -- the momentum buffer -----------------------------------------------------------------------
def _momentum_inputs(rest: tuple[Any, ...], weight_decay: float, dampening: float,
                     ) -> tuple[Any, Any]:
    """``(w, step)`` from the inputs after ``v, g`` (None where not an input)."""
    w = rest[0] if weight_decay else None
    return w, (rest[-1] if dampening else None)


def _momentum_infer(v: TensorSpec, g: TensorSpec, *rest: TensorSpec, momentum: float,
                    dampening: float, weight_decay: float) -> TensorSpec:
    if len(rest) != bool(weight_decay) + bool(dampening):
        raise ShapeError(f"sgd_momentum_ takes w with weight decay and step with dampening: "
                         f"{len(rest)} extra inputs for weight_decay={weight_decay}, "
                         f"dampening={dampening}")
    w, step = _momentum_inputs(rest, weight_decay, dampening)
    return _check(v, [g] + ([w] if w is not None else []), step, "the step count")


def _momentum_out(v: np.ndarray, g: np.ndarray, *rest: np.ndarray, out: np.ndarray,
                  scratch: tuple[np.ndarray], momentum: float, dampening: float,
                  weight_decay: float) -> np.ndarray:
    """``sgd_momentum_`` into ``out`` (``v`` itself, or a spare array of its shape)."""
    w, step = _momentum_inputs(rest, weight_decay, dampening)
    dtype = v.dtype.type
    d = g
    if w is not None:
        d = np.add(g, np.multiply(w, dtype(weight_decay), out=scratch[0]), out=scratch[0])
    if step is not None:
        coef = dtype(step == 1) * dtype(dampening) + dtype(1.0 - dampening)
        d = np.multiply(d, coef, out=scratch[0])
    np.multiply(v, dtype(momentum), out=out)
    return np.add(out, d, out=out)


def _momentum(v: np.ndarray, g: np.ndarray, *rest: np.ndarray, momentum: float,
              dampening: float, weight_decay: float) -> np.ndarray:
    return _momentum_out(v, g, *rest, out=v, scratch=(np.empty_like(v),), momentum=momentum,
                         dampening=dampening, weight_decay=weight_decay)


def _momentum_ref(v: np.ndarray, g: np.ndarray, *rest: np.ndarray, momentum: float,
                  dampening: float, weight_decay: float) -> np.ndarray:
    w, step = _momentum_inputs(rest, weight_decay, dampening)
    d = g + weight_decay * w if w is not None else g
    coef = 1.0 if step is None or step == 1 else 1.0 - dampening
    return momentum * v + coef * d


@bits
def momentum_plain(v, g, out, m):  # noqa: ANN001, ANN201 - numba infers the types
    """``v m + g``; ``out`` may be ``v`` (each loop here: one element at a time; float16 arrays
    as their bits, ``loops.bits``)."""
    vs, gs, outs = v.reshape(-1), g.reshape(-1), out.reshape(-1)
    for i in range(vs.size):
        store(outs, i, load(vs, i) * m + load(gs, i))


@bits
def momentum_decay(v, g, w, out, m, wd):  # noqa: ANN001, ANN201
    """``v m + (g + w wd)``."""
    vs, gs, ws, outs = v.reshape(-1), g.reshape(-1), w.reshape(-1), out.reshape(-1)
    for i in range(vs.size):
        store(outs, i, load(vs, i) * m + (load(gs, i) + load(ws, i) * wd))


@bits
def momentum_damped(v, g, step, out, m, damp, keep, one, zero):  # noqa: ANN001, ANN201
    """``v m + g c``, ``c = [step == 1] damp + keep`` (``keep`` is ``1 - damp``)."""
    vs, gs, outs = v.reshape(-1), g.reshape(-1), out.reshape(-1)
    c = (one if load(step.reshape(-1), 0) == one else zero) * damp + keep
    for i in range(vs.size):
        store(outs, i, load(vs, i) * m + load(gs, i) * c)


@bits
def momentum_decay_damped(v, g, w, step, out, m, wd, damp, keep, one, zero):  # noqa: ANN001, ANN201
    """``v m + (g + w wd) c``."""
    vs, gs, ws, outs = v.reshape(-1), g.reshape(-1), w.reshape(-1), out.reshape(-1)
    c = (one if load(step.reshape(-1), 0) == one else zero) * damp + keep
    for i in range(vs.size):
        store(outs, i, load(vs, i) * m + (load(gs, i) + load(ws, i) * wd) * c)


def _momentum_loop(ins: list[TensorSpec], momentum: float, dampening: float,
                   weight_decay: float) -> Any:
    damped = (dampening, 1.0 - dampening, 1.0, 0.0)
    if weight_decay and dampening:
        return float_only(ins[0], momentum_decay_damped, (momentum, weight_decay, *damped))
    if weight_decay:
        return float_only(ins[0], momentum_decay, (momentum, weight_decay))
    if dampening:
        return float_only(ins[0], momentum_damped, (momentum, *damped))
    return float_only(ins[0], momentum_plain, (momentum,))


def _momentum_samples(rng: np.random.Generator) -> list[Sample]:
    v, g, w = (rng.normal(size=(3, 4)) for _ in range(3))
    return [Sample((v, g), {"momentum": 0.9, "dampening": 0.0, "weight_decay": 0.0}),
            Sample((v, g, w), {"momentum": 0.8, "dampening": 0.0, "weight_decay": 0.01}),
            Sample((v, g, None, np.array(1.0)),
                   {"momentum": 0.9, "dampening": 0.3, "weight_decay": 0.0}),
            Sample((v, g, None, np.array(3.0)),
                   {"momentum": 0.9, "dampening": 0.3, "weight_decay": 0.0}),
            Sample((v, g, w, np.array(2.0)),
                   {"momentum": 0.5, "dampening": 0.1, "weight_decay": 0.05})]


_SGD_MOMENTUM = OpDef("sgd_momentum_", _momentum_infer, _momentum, inplace_of=0,
                      kernel_out=_momentum_out, scratch=1, loop=_momentum_loop,
                      ref=_momentum_ref, samples=_momentum_samples, cost=per_output(5),
                      widen_half=True)


@register(_SGD_MOMENTUM)
def sgd_momentum_(v: Tensor, g: Tensor, w: Tensor | None = None, step: Any = None,
                  momentum: float = 0.9, dampening: float = 0.0,
                  weight_decay: float = 0.0) -> Tensor:
    """In place ``v = momentum v + c (g + weight_decay w)``: torch SGD's momentum buffer, with
    ``c = 1 - dampening`` except at ``step == 1`` (``c = 1``). ``w`` is needed with a weight
    decay, ``step`` (this update's count, from 1) with a dampening.

    Raises:
        ValueError: ``w`` or ``step`` missing where needed.
    """
    if weight_decay and w is None or dampening and step is None:
        raise ValueError("sgd_momentum_ needs w with a weight decay and step with a dampening")
    ins = [v, as_tensor(g, v)] + ([as_tensor(w, v)] if weight_decay else []) + (
        [as_tensor(step, v)] if dampening else [])
    return apply1(_SGD_MOMENTUM, ins, {"momentum": float(momentum),
                                       "dampening": float(dampening),
                                       "weight_decay": float(weight_decay)})


# -- the weight --------------------------------------------------------------------------------
def _update_infer(w: TensorSpec, x: TensorSpec, lr: TensorSpec, *v: TensorSpec,
                  momentum: float, weight_decay: float) -> TensorSpec:
    if len(v) != bool(momentum):
        raise ShapeError(f"sgd_update_ takes v exactly when momentum is set: momentum="
                         f"{momentum} with {len(v)} momentum buffers")
    return _check(w, [x, *v], lr, "the learning rate")


def _update_out(w: np.ndarray, x: np.ndarray, lr: np.ndarray, *v: np.ndarray, out: np.ndarray,
                scratch: tuple[np.ndarray, np.ndarray], momentum: float,
                weight_decay: float) -> np.ndarray:
    """``sgd_update_`` into ``out`` (``w`` itself, or a spare array of its shape)."""
    dtype = w.dtype.type
    d = x
    if weight_decay:
        d = np.add(x, np.multiply(w, dtype(weight_decay), out=scratch[0]), out=scratch[0])
    if v:
        d = np.add(d, np.multiply(v[0], dtype(momentum), out=scratch[1]), out=scratch[0])
    step = np.multiply(lr, d, out=scratch[0])
    return np.subtract(w, step, out=out)


def _update(w: np.ndarray, x: np.ndarray, lr: np.ndarray, *v: np.ndarray, momentum: float,
            weight_decay: float) -> np.ndarray:
    return _update_out(w, x, lr, *v, out=w, scratch=(np.empty_like(w), np.empty_like(w)),
                       momentum=momentum, weight_decay=weight_decay)


def _update_ref(w: np.ndarray, x: np.ndarray, lr: np.ndarray, *v: np.ndarray, momentum: float,
                weight_decay: float) -> np.ndarray:
    d = x + weight_decay * w + (momentum * v[0] if v else 0.0)
    return w - lr * d


@bits
def update_plain(w, x, lr, out):  # noqa: ANN001, ANN201
    """``w - lr x``; ``out`` may be ``w``."""
    ws, xs, outs = w.reshape(-1), x.reshape(-1), out.reshape(-1)
    r = load(lr.reshape(-1), 0)
    for i in range(ws.size):
        store(outs, i, load(ws, i) - r * load(xs, i))


@bits
def update_decay(w, x, lr, out, wd):  # noqa: ANN001, ANN201
    """``w - lr (x + w wd)``."""
    ws, xs, outs = w.reshape(-1), x.reshape(-1), out.reshape(-1)
    r = load(lr.reshape(-1), 0)
    for i in range(ws.size):
        wi = load(ws, i)
        store(outs, i, wi - r * (load(xs, i) + wi * wd))


@bits
def update_nesterov(w, x, lr, v, out, m):  # noqa: ANN001, ANN201
    """``w - lr (x + v m)``."""
    ws, xs, vs, outs = w.reshape(-1), x.reshape(-1), v.reshape(-1), out.reshape(-1)
    r = load(lr.reshape(-1), 0)
    for i in range(ws.size):
        store(outs, i, load(ws, i) - r * (load(xs, i) + load(vs, i) * m))


@bits
def update_nesterov_decay(w, x, lr, v, out, m, wd):  # noqa: ANN001, ANN201
    """``w - lr ((x + w wd) + v m)``."""
    ws, xs, vs, outs = w.reshape(-1), x.reshape(-1), v.reshape(-1), out.reshape(-1)
    r = load(lr.reshape(-1), 0)
    for i in range(ws.size):
        wi = load(ws, i)
        store(outs, i, wi - r * ((load(xs, i) + wi * wd) + load(vs, i) * m))


def _update_loop(ins: list[TensorSpec], momentum: float, weight_decay: float) -> Any:
    if momentum and weight_decay:
        return float_only(ins[0], update_nesterov_decay, (momentum, weight_decay))
    if momentum:
        return float_only(ins[0], update_nesterov, (momentum,))
    if weight_decay:
        return float_only(ins[0], update_decay, (weight_decay,))
    return float_only(ins[0], update_plain)


def _update_samples(rng: np.random.Generator) -> list[Sample]:
    w, x, v = (rng.normal(size=(3, 4)) for _ in range(3))
    lr = np.array(0.1)
    return [Sample((w, x, lr), {"momentum": 0.0, "weight_decay": 0.0}),
            Sample((w, x, lr), {"momentum": 0.0, "weight_decay": 0.02}),
            Sample((w, x, lr, v), {"momentum": 0.9, "weight_decay": 0.0}),
            Sample((w, x, lr, v), {"momentum": 0.7, "weight_decay": 0.05})]


_SGD_UPDATE = OpDef("sgd_update_", _update_infer, _update, inplace_of=0,
                    kernel_out=_update_out, scratch=2, loop=_update_loop, ref=_update_ref,
                    samples=_update_samples, cost=per_output(6), widen_half=True)


@register(_SGD_UPDATE)
def sgd_update_(w: Tensor, x: Tensor, lr: Any, v: Tensor | None = None, momentum: float = 0.0,
                weight_decay: float = 0.0) -> Tensor:
    """In place ``w = w - lr (x + weight_decay w + momentum v)``: an SGD step along ``x`` (a
    momentum buffer, or the gradient), with L2 weight decay and, for Nesterov momentum, the
    updated buffer ``v`` (each term only when given).

    Raises:
        ValueError: ``v`` without ``momentum`` or the reverse.
    """
    if (v is None) != (not momentum):
        raise ValueError("sgd_update_ takes v exactly when momentum is nonzero")
    ins = [w, as_tensor(x, w), as_tensor(lr, w)] + ([as_tensor(v, w)] if v is not None else [])
    return apply1(_SGD_UPDATE, ins, {"momentum": float(momentum),
                                     "weight_decay": float(weight_decay)})
