"""``AdamOptimizerStep``: one Adam(W) update of a variable as an addons module."""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import numpy as np

import xlgraph as popxl
from xlgraph import ops
from xlgraph.addons.module import Module

__all__ = ["AdamOptimizerStep"]


class AdamOptimizerStep(Module):
    """Updates ``var`` in place from ``grad``; the moments (and the step count) are the
    module's variables: ``first_order`` (``first_order_dtype``), ``second_order`` (float32) and
    ``step`` (float32, with ``bias_correction``).

    Build it with ``create_graph(var, grad.spec, lr=...)`` (``var`` is passed by reference),
    then ``graph.bind(facts.init()).call(var, grad)``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """``Module``'s arguments (``cache``)."""
        super().__init__(*args, **kwargs)

    @popxl.in_sequence(True)
    def build(self, var: popxl.TensorByRef, grad: popxl.Tensor,
              replica_grouping: popxl.ReplicaGrouping | None = None, *, lr: Any,
              beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-5,
              weight_decay: float = 0.01, first_order_dtype: popxl.dtype = popxl.float16,
              bias_correction: bool = True, loss_scaling: Any = 1, global_norm: Any = None,
              global_norm_max: Any = None) -> None:
        """Add the update ops.

        The gradient is scaled by ``c = 1 / loss_scaling``, times ``M / max(global_norm, M)``
        with ``global_norm`` (``M = global_norm_max``, then required); when ``c`` is not 1 the
        gradient is first cast to float32. The moments take ``var``'s whole (meta-)shape,
        sharded like ``var`` when it is a replica shard; ``step`` uses the default grouping.

        Raises:
            ValueError: ``global_norm`` without ``global_norm_max``.
        """
        scale = _scale(loss_scaling, global_norm, global_norm_max)
        if scale is not None:
            grad = _as(grad, popxl.float32) * scale
        first = self._moment("first_order", var, first_order_dtype, replica_grouping)
        ops.var_updates.accumulate_moving_average_(first, _as(grad, first_order_dtype), f=beta1)
        second = self._moment("second_order", var, popxl.float32, replica_grouping)
        ops.var_updates.accumulate_moving_average_square_(second, _as(grad, popxl.float32),
                                                          f=beta2)
        step = None
        if bias_correction:
            step = self.add_variable_input("step", partial(np.zeros, ()), popxl.float32,
                                           by_ref=True)
        update = ops.var_updates.adam_updater(
            _as(first, popxl.float32), second, weight=_as(var, popxl.float32),
            weight_decay=weight_decay, time_step=step, beta1=beta1, beta2=beta2, epsilon=eps)
        ops.scaled_add_(var, _as(update, var.dtype), b=-lr)

    def _moment(self, name: str, var: popxl.Tensor, dtype: popxl.dtype,
                replica_grouping: popxl.ReplicaGrouping | None) -> popxl.Tensor:
        """A zero moment of ``var``'s whole shape, sharded as ``var`` is."""
        if var.meta_shape:
            shard_over = math.prod(var.meta_shape) // var.nelms
            return self.add_replica_sharded_variable_input(
                name, partial(np.zeros, var.meta_shape), dtype, by_ref=True,
                replica_grouping=replica_grouping, shard_over=shard_over)
        return self.add_variable_input(name, partial(np.zeros, var.shape), dtype, by_ref=True,
                                       replica_grouping=replica_grouping)


def _scale(loss_scaling: Any, global_norm: Any, global_norm_max: Any) -> Any:
    """``1 / loss_scaling`` (times the clipping factor), or None when it is the number 1."""
    scale = None if not isinstance(loss_scaling, popxl.Tensor) and loss_scaling == 1 \
        else 1 / loss_scaling
    if global_norm is not None:
        if global_norm_max is None:
            raise ValueError("AdamOptimizerStep: global_norm needs global_norm_max")
        limit = global_norm_max
        if not isinstance(limit, popxl.Tensor):
            limit = popxl.constant(limit, global_norm.dtype)
        clip = limit / ops.maximum(global_norm, limit)
        scale = clip if scale is None else clip * scale
    return scale


def _as(t: popxl.Tensor, dtype: popxl.dtype) -> popxl.Tensor:
    return t if t.dtype == dtype else ops.cast(t, dtype)

