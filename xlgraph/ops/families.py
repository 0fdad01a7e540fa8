"""Op families: ``unary``, ``binary``, ``reduction`` and ``inplace`` register simple ops in one
to three lines (an ``OpDef`` with the family's infer rule, test samples and builder)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from xlgraph.core.op import (
    REGISTRY,
    Infer,
    OpDef,
    Sample,
    apply1,
    as_tensor,
    broadcast_shapes,
    normalize_axes,
    register,
    same_dtype,
    same_spec,
)
from xlgraph.core.tensor import Tensor, TensorSpec
from xlgraph.ops.replicas import shift_axes

__all__ = ["unary", "binary", "reduction", "inplace", "copied_out"]


def copied_out(kernel: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """An ``OpDef.kernel_out`` for a ``kernel`` that returns a fresh array: its result copied
    into ``out``. It lets an op whose loop form writes into a buffer (and so can join a fused
    segment) keep numpy's kernel where that loop form does not apply. A tuple ``out`` takes
    the kernel's results in order."""
    def kernel_out(*arrays: np.ndarray, out: Any, **attrs: Any) -> Any:
        result = kernel(*arrays, **attrs)
        for o, r in zip(out, result) if isinstance(out, tuple) else ((out, result),):
            np.copyto(o, r)
        return out

    return kernel_out


def _named(fn: Callable[..., Any], name: str, doc: str) -> Callable[..., Any]:
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return fn


def _uniform_samples(shapes: Sequence[Sequence[tuple[int, ...]]], domain: tuple[float, float]):
    def samples(rng: np.random.Generator) -> list[Sample]:
        return [Sample(tuple(rng.uniform(*domain, s) for s in group)) for group in shapes]

    return samples


def unary(
    name: str, kernel: Callable[..., Any], grad: Callable[..., Any] | None = None, *,
    domain: tuple[float, float] = (-2.0, 2.0), doc: str = "", **flags: Any,
) -> Callable[[Tensor], Tensor]:
    """Register an elementwise one-input op; returns its builder ``f(t)``."""
    flags.setdefault("samples", _uniform_samples([[(3, 4)], [(2, 3, 5)]], domain))
    flags.setdefault("widen_half", True)
    defn = OpDef(name, same_spec, kernel, grad, elementwise=True, **flags)
    doc = doc or f"Elementwise {name}."
    return register(defn)(_named(lambda t: apply1(defn, [t]), name, doc))


def inplace(defn_name: str, doc: str = "") -> Callable[[Tensor], Tensor]:
    """Register the in-place variant ``<name>_`` of a registered unary op."""
    base = REGISTRY[defn_name]
    fn = base.kernel

    def kernel(x: np.ndarray) -> np.ndarray:
        np.copyto(x, fn(x))
        return x

    defn = OpDef(
        defn_name + "_", same_spec, kernel, None, inplace_of=0, samples=base.samples,
        ref=lambda x: fn(x.copy()), cost=base.cost, widen_half=base.widen_half,
    )
    doc = doc or f"In-place {defn_name}: modifies and returns its input."
    return register(defn)(_named(lambda t: apply1(defn, [t]), defn_name + "_", doc))


def _binary_infer(out_dtype: Any) -> Infer:
    def infer(a: TensorSpec, b: TensorSpec) -> TensorSpec:
        same_dtype(a, b)
        return TensorSpec(broadcast_shapes(a.shape, b.shape), out_dtype or a.dtype)

    return infer


_BINARY_SHAPES = [[(3, 4), (3, 4)], [(2, 3, 4), (4,)], [(3, 1), (1, 4)]]


def binary(
    name: str, kernel: Callable[..., Any], grad: Callable[..., Any] | None = None, *,
    domain: tuple[float, float] = (-2.0, 2.0), out_dtype: Any = None, doc: str = "",
    operands: tuple[str, str] = ("lhs", "rhs"), **flags: Any,
) -> Callable[[Any, Any], Tensor]:
    """Register a broadcasting two-input op; returns its builder ``f(lhs, rhs)`` (with the
    parameter names ``operands``, PopXL's where they differ: ``pow(t, e)``).

    A non-Tensor operand becomes a constant of the other operand's dtype.
    """
    flags.setdefault("samples", _uniform_samples(_BINARY_SHAPES, domain))
    flags.setdefault("widen_half", True)
    defn = OpDef(name, _binary_infer(out_dtype), kernel, grad, elementwise=True, **flags)

    def builder(lhs: Any, rhs: Any) -> Tensor:
        if not isinstance(lhs, Tensor):
            lhs = as_tensor(lhs, rhs)
        rhs = as_tensor(rhs, lhs)
        return apply1(defn, [lhs, rhs])

    if operands != ("lhs", "rhs"):
        builder = _with_parameters(builder, operands)
    return register(defn)(_named(builder, name, doc or f"Elementwise {name} with broadcasting."))


def _with_parameters(fn: Callable[..., Tensor], names: Sequence[str]) -> Callable[..., Tensor]:
    """``fn`` taking its positional parameters under ``names`` (as keywords too)."""
    signature = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names])

    def renamed(*args: Any, **kwargs: Any) -> Tensor:
        return fn(*signature.bind(*args, **kwargs).args)

    renamed.__signature__ = signature  # type: ignore[attr-defined]
    return renamed


def _reduce_infer(t: TensorSpec, axis: tuple[int, ...], keepdims: bool) -> TensorSpec:
    shape = tuple(1 if i in axis else d for i, d in enumerate(t.shape) if keepdims or i not in axis)
    return TensorSpec(shape, t.dtype)


def _reduction_samples(rng: np.random.Generator) -> list[Sample]:
    return [
        Sample((rng.uniform(-2, 2, (3, 4, 5)),), {"axis": None}),
        Sample((rng.uniform(-2, 2, (3, 4, 5)),), {"axis": 1}),
        Sample((rng.uniform(-2, 2, (3, 4, 5)),), {"axis": (0, 2), "keepdims": True}),
    ]


def reduction(
    name: str, kernel: Callable[..., Any], grad: Callable[..., Any] | None = None, *,
    doc: str = "", **flags: Any,
) -> Callable[..., Tensor]:
    """Register a reduction ``f(t, axis=None, keepdims=False)``; kernel(x, axis, keepdims)."""
    flags.setdefault("samples", _reduction_samples)
    flags.setdefault("replicated", shift_axes(kernel, "axis"))
    flags.setdefault("widen_half", True)
    defn = OpDef(name, _reduce_infer, kernel, grad, **flags)

    def builder(t: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
        axes = normalize_axes(axis, t.rank)
        return apply1(defn, [t], {"axis": axes, "keepdims": bool(keepdims)})

    doc = doc or f"Reduce by {name} over ``axis`` (all axes when None)."
    return register(defn)(_named(builder, name, doc))
