"""In-place updates used by optimisers (PopXL's ``ops.var_updates``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from xlgraph.errors import ShapeError
from xlgraph.op import OpDef, Sample, apply1, as_tensor, broadcast_shapes, register, same_dtype
from xlgraph.tensor import Tensor, TensorSpec

__all__ = ["accumulate_", "copy_var_update_"]


def _update_infer(t: TensorSpec, x: TensorSpec, **_: Any) -> TensorSpec:
    same_dtype(t, x)
    if broadcast_shapes(t.shape, x.shape) != t.shape:
        raise ShapeError(f"cannot update {t} from {x}")
    return t


def _two(rng: np.random.Generator) -> list[Sample]:
    return [Sample((rng.normal(size=(3, 4)), rng.normal(size=(3, 4))))]


def _accumulate(t: np.ndarray, x: np.ndarray, f: float) -> np.ndarray:
    if f == 1.0:
        t += x
    else:
        t += f * x
    return t


def _copy_update(t: np.ndarray, x: np.ndarray) -> np.ndarray:
    np.copyto(t, x)
    return t


_ACCUMULATE = OpDef("accumulate_", _update_infer, _accumulate, inplace_of=0,
                    ref=lambda t, x, f: t + f * x,
                    samples=lambda rng: [Sample(_two(rng)[0].args, {"f": 0.3})])
_COPY_VAR_UPDATE = OpDef("copy_var_update_", _update_infer, _copy_update, inplace_of=0,
                         ref=lambda t, x: np.broadcast_to(x, t.shape).copy(), samples=_two)


@register(_ACCUMULATE)
def accumulate_(t: Tensor, X: Tensor, f: Any = None) -> Tensor:  # noqa: N803
    """In place ``t += f * X`` (``f`` defaults to 1; a number or a scalar tensor)."""
    if isinstance(f, Tensor):
        return copy_var_update_(t, t + X * f)
    return apply1(_ACCUMULATE, [t, X], {"f": 1.0 if f is None else float(f)})


@register(_COPY_VAR_UPDATE)
def copy_var_update_(t: Tensor, X: Tensor) -> Tensor:  # noqa: N803
    """In place ``t = X``."""
    return apply1(_COPY_VAR_UPDATE, [t, as_tensor(X, t)])
