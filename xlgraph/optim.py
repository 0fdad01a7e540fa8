"""Optimisers that match ``torch.optim`` step for step: SGD, Adam, AdamW, RMSprop, and LAMB.

An optimiser creates its state (learning rate, step count, per-parameter buffers) as variables of
the main graph with ``create_state`` and writes one update with ``update``, in the current graph
(the main graph, or a training-step body that receives the variables as inputs). The learning
rate is a variable, so ``set_lr(session, value)`` changes it between runs without rebuilding.

Example:
    >>> opt = optim.SGD(lr=0.1, momentum=0.9)
    >>> with ir.main_graph, xlgraph.in_sequence():
    ...     state = opt.create_state(params)          # {name: Variable}
    ...     opt.update(params, grads, state)          # in-place updates of params and state
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from xlgraph import dtypes, ops
from xlgraph.ops.sgd_updates import sgd_momentum_, sgd_update_
from xlgraph.ops.var_updates import (
    accumulate_moving_average_,
    accumulate_moving_average_square_,
    copy_var_update_,
)
from xlgraph.tensor import Tensor, Variable, constant, variable

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "LAMB"]


def _where_positive(t: Tensor, then: Tensor, otherwise: float) -> Tensor:
    return ops.where(ops.greater(t, 0.0), then, otherwise)


class Optimizer:
    """Base class: owns the learning-rate variable and the naming of state variables.

    Subclasses set ``slots`` (per-parameter buffers, initialised to zero), ``uses_step`` and
    implement ``_step_param``.

    Args:
        lr: initial learning rate.
        weight_decay: decay factor (L2 added to the gradient unless a subclass says otherwise).
        name: prefix of the state variables (``<name>.lr``, ``<name>.<slot>.<param>``).
    """

    slots: tuple[str, ...] = ()
    slot_init: dict[str, float] = {}  # a slot's initial value where it is not zero
    uses_step = False

    def __init__(self, lr: float, weight_decay: float = 0.0, name: str | None = None) -> None:
        if lr < 0 or weight_decay < 0:
            raise ValueError(f"lr ({lr}) and weight_decay ({weight_decay}) must be >= 0")
        self.lr = float(lr)
        self.weight_decay = float(weight_decay)
        self.name = name or type(self).__name__.lower()
        self.lr_variable: Variable | None = None

    # -- state -------------------------------------------------------------------------------
    def slot_name(self, slot: str, param: str) -> str:
        """The state-variable name of buffer ``slot`` of parameter ``param``."""
        return f"{self.name}.{slot}.{param}"

    def create_state(self, params: Mapping[str, Tensor]) -> dict[str, Variable]:
        """Create the optimiser's variables in the current (main) graph.

        Args:
            params: ``{name: parameter}``; only shapes and dtypes are read.

        Returns:
            ``{state name: Variable}``: ``<name>.lr``, ``<name>.step`` when the optimiser counts
            steps, and one buffer per slot and parameter (zero unless ``slot_init`` says).
        """
        self.lr_variable = variable(np.float32(self.lr), dtypes.float32, name=f"{self.name}.lr")
        state: dict[str, Variable] = {f"{self.name}.lr": self.lr_variable}
        if self.uses_step:
            state[f"{self.name}.step"] = variable(np.float32(0), dtypes.float32,
                                                  name=f"{self.name}.step")
        for pname, p in params.items():
            # a replica-grouped parameter's buffers are grouped as it is (one value per group)
            grouping = getattr(p, "replica_grouping", None)
            grouped = grouping is not None and grouping.num_groups > 1
            shape = (grouping.num_groups, *p.shape) if grouped else p.shape
            for slot in self.slots:
                key = self.slot_name(slot, pname)
                start = np.full(shape, self.slot_init.get(slot, 0.0), p.dtype.as_numpy())
                state[key] = variable(start, p.dtype, name=key,
                                      replica_grouping=grouping if grouped else None)
        return state

    def set_lr(self, session: Any, lr: float) -> None:
        """Change the learning rate used by the following runs of ``session``."""
        if self.lr_variable is None:
            raise RuntimeError("create_state() has not been called: there is no lr variable yet")
        self.lr = float(lr)
        session.write_variable_data(self.lr_variable, np.float32(lr))

    # -- update ------------------------------------------------------------------------------
    def update(self, params: Mapping[str, Tensor], grads: Mapping[str, Tensor],
               state: Mapping[str, Tensor]) -> None:
        """Update ``params`` and ``state`` in place from ``grads`` (all in the current graph).

        Args:
            params: ``{name: parameter tensor}``.
            grads: ``{name: gradient}`` for the same names.
            state: ``{state name: tensor}`` for the names ``create_state`` returned.
        """
        missing = sorted(set(params) - set(grads))
        if missing:
            raise KeyError(f"{self.name}: no gradient for {missing}")
        lr = state[f"{self.name}.lr"]
        step = None
        if self.uses_step:
            counter = state[f"{self.name}.step"]
            step = counter + 1.0
            copy_var_update_(counter, step)
        for pname, p in params.items():
            slots = {s: state[self.slot_name(s, pname)] for s in self.slots}
            # float16 parameters step in float16 (the rate and step count cast to match)
            p_lr, p_step = (lr, step) if p.dtype == lr.dtype else (
                ops.cast(lr, p.dtype), None if step is None else ops.cast(step, p.dtype))
            new_p = self._step_param(p, grads[pname], slots, p_lr, p_step)
            if new_p is not None:  # else the step updated p in place
                copy_var_update_(p, new_p)

    def _l2(self, p: Tensor, g: Tensor) -> Tensor:
        return g + p * self.weight_decay if self.weight_decay else g

    def _step_param(self, p: Tensor, g: Tensor, slots: dict[str, Tensor], lr: Tensor,
                    step: Tensor | None) -> Tensor:
        """Write the slot updates and return the new value of ``p`` (None when it updated
        ``p`` in place)."""
        raise NotImplementedError


class SGD(Optimizer):
    """``torch.optim.SGD``: momentum, dampening, nesterov and L2 weight decay.

    The first step with momentum sets the buffer to the gradient (no dampening), as torch does.
    """

    def __init__(self, lr: float, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False,
                 name: str | None = None) -> None:
        super().__init__(lr, weight_decay, name)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        self.momentum, self.dampening, self.nesterov = float(momentum), float(dampening), nesterov
        self.slots = ("momentum_buffer",) if momentum else ()
        self.uses_step = bool(momentum and dampening)

    def _step_param(self, p, g, slots, lr, step):
        # two fused in-place updates (xlgraph.ops.sgd_updates): the buffer, then the weight
        wd = self.weight_decay
        if not self.momentum:
            sgd_update_(p, g, lr, weight_decay=wd)
            return None
        # step 1 takes the gradient undamped: coefficient 1 then 1 - dampening after
        buf = sgd_momentum_(slots["momentum_buffer"], g, p if wd else None,
                            step if self.dampening else None, momentum=self.momentum,
                            dampening=self.dampening, weight_decay=wd)
        if self.nesterov:
            sgd_update_(p, g, lr, buf, momentum=self.momentum, weight_decay=wd)
        else:
            sgd_update_(p, buf, lr)
        return None


class Adam(Optimizer):
    """``torch.optim.Adam`` (L2 weight decay added to the gradient; no amsgrad)."""

    slots = ("exp_avg", "exp_avg_sq")
    uses_step = True
    decoupled = False

    def __init__(self, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, name: str | None = None,
                 bias_correction: bool = True) -> None:
        super().__init__(lr, weight_decay, name)
        self.beta1, self.beta2 = float(betas[0]), float(betas[1])
        self.eps = float(eps)
        self.bias_correction = bool(bias_correction)

    def _moments(self, g: Tensor, slots: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Update both moving averages; return their new values ``(m, v)``."""
        m = accumulate_moving_average_(slots["exp_avg"], g, self.beta1)
        v = accumulate_moving_average_square_(slots["exp_avg_sq"], g, self.beta2)
        return m, v

    def _bias_corrections(self, step: Tensor) -> tuple[Tensor, Tensor]:
        """``(1 - beta1^t, sqrt(1 - beta2^t))`` at step ``t``; ``(1, 1)`` without
        ``bias_correction`` (PopTorch's AdamW and LAMB option)."""
        if not self.bias_correction:
            one = constant(1.0, step.dtype)
            return one, one
        bc1 = 1.0 - ops.pow(constant(self.beta1, step.dtype), step)
        bc2 = 1.0 - ops.pow(constant(self.beta2, step.dtype), step)
        return bc1, ops.sqrt(bc2)

    def _step_param(self, p, g, slots, lr, step):
        if self.decoupled:
            p = p * (1.0 - lr * self.weight_decay)
        else:
            g = self._l2(p, g)
        m, v = self._moments(g, slots)
        bc1, bc2_sqrt = self._bias_corrections(step)
        denom = ops.sqrt(v) / bc2_sqrt + self.eps
        return p - (lr / bc1) * (m / denom)


class AdamW(Adam):
    """``torch.optim.AdamW``: Adam with decoupled weight decay (default 0.01)."""

    decoupled = True

    def __init__(self, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, name: str | None = None,
                 bias_correction: bool = True) -> None:
        super().__init__(lr, betas, eps, weight_decay, name, bias_correction)


class RMSprop(Optimizer):
    """``torch.optim.RMSprop``: smoothing ``alpha``, optional momentum and centering.

    ``tf_variant=True`` is TensorFlow's form, as PopART runs it: the squared-gradient average
    starts at 1, ``eps`` is added inside the square root, and with momentum the learning rate
    is folded into the momentum buffer (``buf = momentum * buf + lr * direction; p -= buf``).
    """

    def __init__(self, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum: float = 0.0, centered: bool = False,
                 name: str | None = None, tf_variant: bool = False) -> None:
        super().__init__(lr, weight_decay, name)
        self.alpha, self.eps = float(alpha), float(eps)
        self.momentum, self.centered = float(momentum), centered
        self.tf_variant = tf_variant
        self.slot_init = {"square_avg": 1.0} if tf_variant else {}
        self.slots = ("square_avg",) + (("grad_avg",) if centered else ()) + (
            ("momentum_buffer",) if momentum else ())

    def _step_param(self, p, g, slots, lr, step):
        g = self._l2(p, g)
        sq = accumulate_moving_average_square_(slots["square_avg"], g, self.alpha)
        if self.centered:
            ga = accumulate_moving_average_(slots["grad_avg"], g, self.alpha)
            sq = sq - ga * ga
        direction = g / (ops.sqrt(sq + self.eps) if self.tf_variant
                         else ops.sqrt(sq) + self.eps)
        if not self.momentum:
            return p - lr * direction
        buf = slots["momentum_buffer"]
        if self.tf_variant:
            buf_new = buf * self.momentum + lr * direction
            copy_var_update_(buf, buf_new)
            return p - buf_new
        direction = buf * self.momentum + direction
        copy_var_update_(buf, direction)
        return p - lr * direction


class LAMB(Adam):
    """LAMB (You et al. 2019) as in PopART: Adam direction plus weight decay, scaled per tensor.

    ``u = m_hat / (sqrt(v_hat) + eps) + weight_decay * p``; ``p -= lr * r * u`` with the trust
    ratio ``r = ||p|| / ||u||`` (1 when either norm is zero; ``||p||`` clipped to
    ``max_weight_norm`` when given). torch has no LAMB; it is tested against numpy.
    """

    def __init__(self, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.0,
                 max_weight_norm: float | None = None, name: str | None = None,
                 bias_correction: bool = True) -> None:
        super().__init__(lr, betas, eps, weight_decay, name, bias_correction)
        self.max_weight_norm = max_weight_norm

    def _step_param(self, p, g, slots, lr, step):
        m, v = self._moments(g, slots)
        bc1, bc2_sqrt = self._bias_corrections(step)
        u = (m / bc1) / (ops.sqrt(v) / bc2_sqrt + self.eps)
        if self.weight_decay:
            u = u + p * self.weight_decay
        r1 = ops.sqrt(ops.sum(p * p))
        if self.max_weight_norm is not None:
            limit = constant(self.max_weight_norm, r1.dtype)
            r1 = ops.where(ops.greater(r1, limit), limit, r1)
        r2 = ops.sqrt(ops.sum(u * u))
        safe_r2 = _where_positive(r2, r2, 1.0)
        trust = _where_positive(r1, _where_positive(r2, r1 / safe_r2, 1.0), 1.0)
        return p - (lr * trust) * u
