"""Replica folds: replicated steps rewritten as one-replica ops on a longer axis.

Where an op's replicated form joins the replica axis with one of its own axes, the rewrite
(``xlgraph.lower.replicas``) spells that join out as steps instead of hiding it in the form:

- an op whose replicas fold into its batch axis (``OpDef.replicated.batch``: a matrix product
  by a matrix held once, convolutions, pooling) becomes reshape views folding each batched
  input's replica axis into its batch, the op itself on the folded values, and reshape views
  unfolding its outputs;
- a product summed over the replicas (a weight gradient, ``replicated.summed.folds``) becomes
  the power-of-two mean scale of its smallest input (``replica_scale``), views joining each
  input's replica axis with the contracted one, and the op, whose result is held once.

The planner and the code generator then see the ops of a one-replica program on a longer
batch: pool buffers, the backend's compiled loop forms and fused segments apply as they do
for one replica of the whole batch, and the kernels get the arrays the folded forms got.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from xlgraph.lower.program import Step
from xlgraph.lower.replica_forms import folded_batch
from xlgraph.op import REGISTRY, OpDef, same_spec
from xlgraph.ops import loops
from xlgraph.tensor import TensorSpec

__all__ = ["fold_batch", "folded_steps", "smallest_input", "summed_steps", "SCALE"]


def _scale(x: np.ndarray, scale: float) -> np.ndarray:
    return x * np.asarray(scale, x.dtype)


def _scale_out(x: np.ndarray, out: np.ndarray, scale: float) -> np.ndarray:
    return np.multiply(x, np.asarray(scale, x.dtype), out=out)


SCALE = OpDef("replica_scale", same_spec, _scale, kernel_out=_scale_out, elementwise=True,
              loop=lambda ins, scale: loops.float_only(ins[0], loops.scale, (scale,)))
"""``x * scale`` in ``x``'s dtype (a power of two: exact), the mean of a summed product."""


def fold_batch(defn: OpDef, vary: list[bool], ins: list[TensorSpec]) -> tuple[int, ...] | None:
    """The inputs whose replica axis ``defn`` folds into their batch axis, when the step runs
    its folded form (``replica_forms.folded_batch``, which ``replica_defn`` picks it by) and
    is a plain op with a replicated form (no elementwise op, view or in-place write)."""
    if defn.elementwise or defn.view or defn.inplace_of is not None or defn.replicated is None:
        return None
    return folded_batch(defn, vary, ins)


def _view(steps: list[Step], op: Any, src: int, out: int, name: str, **attrs: Any) -> int:
    """Append a reshape or transpose view of ``src`` into slot ``out``; gives ``out``."""
    steps.append(Step("kernel", [src], [out], op, REGISTRY[name], attrs))
    return out


def _full(one: TensorSpec, local: int) -> TensorSpec:
    return TensorSpec((local, *one.shape), one.dtype, one.meta_shape)


def _joined(spec: TensorSpec, shape: tuple[int, ...]) -> TensorSpec:
    return TensorSpec(shape, spec.dtype)


def folded_steps(s: Step, batch: tuple[int, ...], one: dict[int, TensorSpec], local: int,
                 new: Callable[[TensorSpec], int]) -> list[Step]:
    """``s`` (its inputs at ``batch`` carry the replica axis) as fold views, the op on the
    folded batch and unfold views onto its outputs; ``one`` holds one replica's specs."""
    steps: list[Step] = []
    ins = []
    for i, x in enumerate(s.ins):
        if i in batch:
            spec = one[x]
            shape = (local * spec.shape[0], *spec.shape[1:])
            x = _view(steps, s.op, x, new(_joined(spec, shape)), "reshape", shape=shape)
        ins.append(x)
    outs = [new(_joined(one[o], (local * one[o].shape[0], *one[o].shape[1:]))) for o in s.outs]
    steps.append(Step("kernel", ins, outs, s.op, s.defn, s.attrs))
    for o, folded in zip(s.outs, outs):
        shape = (local, *one[o].shape)
        _view(steps, s.op, folded, o, "reshape", shape=shape)
    return steps


def smallest_input(specs: list[TensorSpec]) -> int:
    """The input a summed product's power-of-two mean scales: the one of fewest elements."""
    return min(range(len(specs)), key=lambda i: math.prod(specs[i].shape))


def summed_steps(s: Step, one: dict[int, TensorSpec], local: int, scale: float,
                 new: Callable[[TensorSpec], int],
                 new_varying: Callable[[int], int]) -> list[Step] | None:
    """``s`` (every input carries the replica axis) summed over the replicas into its output
    (held once) as the op on inputs whose replica axis joins the contracted one, the smallest
    scaled by ``scale`` first (as ``replicas._summed_defn`` does); None where the op's summed
    form declares no such join (``replicated.summed.folds(one_specs, local)``: per input a
    permutation of its full axes, or None, and the shape it is then reshaped to)."""
    folds = getattr(getattr(s.defn.replicated, "summed", None), "folds", None)
    specs = [one[x] for x in s.ins]
    joins = None if folds is None else folds(specs, local)
    if joins is None:
        return None
    steps: list[Step] = []
    smallest = smallest_input(specs)
    ins = []
    for i, (x, (perm, shape)) in enumerate(zip(s.ins, joins)):
        if i == smallest and scale != 1:
            scaled = new_varying(x)
            steps.append(Step("kernel", [x], [scaled], s.op, SCALE, {"scale": scale}))
            x = scaled
        full = _full(one[x], local)
        if perm is not None:
            permuted = tuple(full.shape[p] for p in perm)
            x = _view(steps, s.op, x, new(_joined(full, permuted)), "transpose",
                      permutation=tuple(perm))
        ins.append(_view(steps, s.op, x, new(_joined(full, tuple(shape))), "reshape",
                         shape=tuple(shape)))
    steps.append(Step("kernel", ins, list(s.outs), s.op, s.defn, s.attrs))
    return steps
