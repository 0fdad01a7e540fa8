"""Matrix multiplication."""

from __future__ import annotations

from typing import Any

import numpy as np

from xlgraph import dtypes
from xlgraph.cost import Cost, nelms, traffic
from xlgraph.errors import ShapeError
from xlgraph.op import OpDef, Sample, apply1, broadcast_shapes, register, same_dtype
from xlgraph.ops.matmul_kernel import matmul_out
from xlgraph.ops.replicas import matmul_rule
from xlgraph.tensor import Tensor, TensorSpec


def _matmul_infer(a: TensorSpec, b: TensorSpec) -> TensorSpec:
    same_dtype(a, b)
    if not a.shape or not b.shape:
        raise ShapeError("matmul needs operands of rank >= 1")
    sa = (1,) + a.shape if len(a.shape) == 1 else a.shape
    sb = b.shape + (1,) if len(b.shape) == 1 else b.shape
    if sa[-1] != sb[-2]:
        raise ShapeError(f"inner dimensions differ: lhs {a.shape} vs rhs {b.shape}")
    batch = broadcast_shapes(sa[:-2], sb[:-2])
    out = batch + (sa[-2],) * (len(a.shape) > 1) + (sb[-1],) * (len(b.shape) > 1)
    return TensorSpec(out, a.dtype)


def _swap(t: Tensor) -> Tensor:
    from xlgraph.ops.movement import transpose

    perm = list(range(t.rank))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    return transpose(t, perm)


def _matmul_grad(g: Any, dy: Tensor) -> tuple[Tensor, Tensor]:
    from xlgraph.ops.movement import reshape

    a, b = g.x(0), g.x(1)
    a2 = reshape(a, (1, a.shape[0])) if a.rank == 1 else a
    b2 = reshape(b, (b.shape[0], 1)) if b.rank == 1 else b
    out_shape = _matmul_infer(a2.spec, b2.spec).shape
    dy2 = reshape(dy, out_shape) if dy.shape != out_shape else dy
    da = matmul(dy2, _swap(b2))
    db = matmul(_swap(a2), dy2)
    if a.rank == 1:
        da = reshape(da, da.shape[:-2] + (a.shape[0],))
    if b.rank == 1:
        db = reshape(db, db.shape[:-2] + (b.shape[0],))
    return da, db


def _matmul_samples(rng: np.random.Generator) -> list[Sample]:
    pairs = [((3, 4), (4, 5)), ((2, 3, 4), (4, 2)), ((4,), (4, 3)), ((2, 1, 3, 4), (5, 4, 2))]
    return [Sample((rng.normal(size=a), rng.normal(size=b))) for a, b in pairs]


def matmul_cost(ins: list[TensorSpec], outs: list[TensorSpec], **_: Any) -> Cost:
    """A multiply and an add per output element and inner index (of inputs 0 and 1)."""
    return traffic(ins, outs, 2 * nelms(outs[0]) * ins[0].shape[-1], matrix=True)


_MATMUL = OpDef("matmul", _matmul_infer, matmul_out, _matmul_grad, kernel_out=matmul_out,
                samples=_matmul_samples, cost=matmul_cost, replicated=matmul_rule,
                half_registers=True, c_contiguous=True)  # as np.matmul's fresh results


@register(_MATMUL)
def matmul(lhs: Tensor, rhs: Tensor, available_memory_proportion: float | None = None,
           output_type: Any = None, partials_type: Any = None) -> Tensor:
    """Matrix product with numpy's rules (batch broadcasting, 1-D promotion).

    ``output_type`` (e.g. float32 for float16 operands) computes the product in that type.
    ``available_memory_proportion`` and ``partials_type`` are recorded in ``op.hints`` for the
    ipu_model; the simulator's values do not depend on them.
    """
    hints = {"available_memory_proportion": available_memory_proportion,
             "partials_type": partials_type}
    if output_type is not None and dtypes.as_dtype(output_type) is not lhs.dtype:
        from xlgraph.ops.elementwise import cast

        out = dtypes.as_dtype(output_type)
        hints["output_type"] = out
        lhs, rhs = cast(lhs, out), cast(rhs, out)
    return apply1(_MATMUL, [lhs, rhs], hints=hints)
