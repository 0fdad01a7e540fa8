"""What an op costs: flops, bytes read and written, and which engine runs it.

Every ``OpDef`` has a cost: its own ``cost(in_specs, out_specs, **attrs)`` or, when it declares
none, its family's default (``default_cost``). The lowering (BLAS thread policy) and the
ipu_model (cycles, memory traffic) read these declared facts; nothing runs a kernel to learn them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from xlgraph.core.dispatch import provide

if TYPE_CHECKING:
    from xlgraph.core.op import OpDef
    from xlgraph.core.tensor import TensorSpec

__all__ = ["Cost", "CostFn", "nbytes", "nelms", "traffic", "per_output", "per_input", "free",
           "default_cost", "op_cost"]


@dataclass(frozen=True)
class Cost:
    """Work of one op execution.

    Attributes:
        flops: arithmetic operations (a multiply-add counts two).
        bytes_read: bytes of the inputs the op reads.
        bytes_written: bytes of the outputs it writes.
        matrix: runs on a matrix engine (BLAS here, the AMP units on an IPU) rather than the
            vector units.
    """

    flops: float
    bytes_read: int
    bytes_written: int
    matrix: bool = False


CostFn = Callable[..., Cost]


def nelms(spec: TensorSpec) -> int:
    return math.prod(spec.shape)


def nbytes(spec: TensorSpec) -> int:
    return nelms(spec) * np.dtype(spec.dtype.as_numpy()).itemsize


def traffic(ins: Sequence[TensorSpec], outs: Sequence[TensorSpec], flops: float,
            matrix: bool = False) -> Cost:
    """A cost of ``flops`` that reads every input and writes every output once."""
    return Cost(float(flops), sum(map(nbytes, ins)), sum(map(nbytes, outs)), matrix)


def per_output(flops_per_element: float) -> CostFn:
    """Cost of ops doing ``flops_per_element`` operations per output element."""

    def cost(ins: Sequence[TensorSpec], outs: Sequence[TensorSpec], **_: Any) -> Cost:
        return traffic(ins, outs, flops_per_element * sum(map(nelms, outs)))

    return cost


def per_input(flops_per_element: float) -> CostFn:
    """Cost of ops doing ``flops_per_element`` operations per input element (reductions)."""

    def cost(ins: Sequence[TensorSpec], outs: Sequence[TensorSpec], **_: Any) -> Cost:
        return traffic(ins, outs, flops_per_element * sum(map(nelms, ins)))

    return cost


def free(ins: Sequence[TensorSpec], outs: Sequence[TensorSpec], **_: Any) -> Cost:
    """No work: views, and control ops whose bodies are costed step by step."""
    return Cost(0.0, 0, 0)


def default_cost(defn: OpDef, ins: Sequence[TensorSpec], outs: Sequence[TensorSpec],
                 attrs: dict[str, Any]) -> Cost:
    """The family default for an op that declares no cost.

    Views and control ops cost nothing; host transfers move their data; elementwise ops do one
    operation per output element; any other kernel makes one pass over its inputs.
    """
    if defn.kind in ("host_load", "host_store"):
        return traffic(ins, outs, 0)
    if defn.kind != "kernel" or (defn.view and not defn.side_effect):
        return free(ins, outs)
    if defn.view:  # side-effecting views (print_tensor) read their input
        return traffic(ins, [], 0)
    if defn.elementwise:
        return per_output(1)(ins, outs)
    return per_input(1)(ins, outs)


def op_cost(defn: OpDef, ins: Sequence[TensorSpec], outs: Sequence[TensorSpec],
            attrs: dict[str, Any]) -> Cost:
    """The declared cost of ``defn`` on these specs (its own formula or the family default)."""
    if defn.cost is not None:
        return defn.cost(ins, outs, **attrs)
    return default_cost(defn, ins, outs, attrs)


provide(op_cost=op_cost)  # ``Op.cost`` in the core asks for it by name
