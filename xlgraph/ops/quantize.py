"""Group-quantised weights (popxl-addons' ``group_quantize_decompress``): 4-bit codes packed
four to a uint16, most significant nibble first, with a float16 scale and bias per group.

``out[r, g*4P + 4p + q] = code_q(t[r, g, p]) * scale[r, g] + bias[r, g]``, computed in float16.
The numpy functions compress (``group_quantize_compress_numpy``) and decompress on the host.
"""

from __future__ import annotations

import numpy as np

from xlgraph import dtypes
from xlgraph.cost import per_output
from xlgraph.errors import DTypeError, ShapeError
from xlgraph.op import OpDef, Sample, apply1, register
from xlgraph.ops.replicas import unchanged
from xlgraph.tensor import Tensor, TensorSpec

__all__ = ["group_quantize_decompress", "group_quantize_decompress_numpy",
           "group_quantize_compress_numpy"]

_SHIFTS = np.array([12, 8, 4, 0], np.uint16)


def _codes(t: np.ndarray) -> np.ndarray:
    """The four 4-bit codes of every uint16 of ``t``, on a new last axis."""
    return (t[..., None] >> _SHIFTS) & np.uint16(15)


def group_quantize_decompress_numpy(t: np.ndarray, scale: np.ndarray, bias: np.ndarray,
                                    dim: int = -1) -> np.ndarray:
    """Decompress packed codes ``t`` ``(*lead, groups, P)`` with ``scale`` and ``bias``
    ``(*lead, groups, 1)`` (or ``(*lead, groups)``) into ``(*lead, groups * P * 4)`` (in the
    scale's dtype), the last axis moved to ``dim``."""
    scale, bias = (np.asarray(x) if np.ndim(x) == t.ndim else np.asarray(x)[..., None]
                   for x in (scale, bias))
    codes = _codes(np.asarray(t, np.uint16)).astype(scale.dtype)
    out = codes * scale[..., None] + bias[..., None]
    out = out.reshape(*out.shape[:-3], -1)
    return np.moveaxis(out, -1, dim)


def group_quantize_compress_numpy(t: np.ndarray, group_size: int, dim: int = -1
                                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Compress ``t`` along ``dim`` in groups of ``group_size`` (a multiple of 4): per group
    ``bias = min``, ``scale = (max - min) / 15``, codes ``round((x - bias) / scale)`` (in
    ``t``'s precision) packed four to a uint16; scale and bias returned as float16.
    Returns ``(packed (*lead, groups, group_size/4), scale (*lead, groups, 1), bias (*lead,
    groups, 1))``. A constant group divides by 0."""
    x = np.moveaxis(np.asarray(t), dim, -1)
    if not np.isfinite(x).all():
        raise ValueError("group_quantize_compress_numpy: t holds non-finite values")
    if group_size % 4 or x.shape[-1] % group_size:
        raise ValueError(f"group_quantize_compress_numpy: group_size {group_size} must be a "
                         f"multiple of 4 dividing axis {dim} of length {x.shape[-1]}")
    groups = x.reshape(*x.shape[:-1], -1, group_size)
    bias = groups.min(-1, keepdims=True)
    scale = (groups.max(-1, keepdims=True) - bias) / 15
    with np.errstate(divide="ignore", invalid="ignore"):
        codes = np.round((groups - bias) / scale)
    codes = np.nan_to_num(codes, nan=0.0).clip(0, 15).astype(np.uint16)
    quads = codes.reshape(*codes.shape[:-1], -1, 4)
    packed = (quads << _SHIFTS).sum(-1, dtype=np.uint16)
    return packed, scale.astype(np.float16), bias.astype(np.float16)


def _infer(t: TensorSpec, scale: TensorSpec, bias: TensorSpec, dim: int) -> TensorSpec:
    if t.dtype != dtypes.uint16:
        raise DTypeError(f"t must hold uint16 packed codes, got {t}")
    if scale.shape != t.shape[:2] + (1,) or bias.shape != scale.shape:
        raise ShapeError(f"group_scale and group_bias must be {t.shape[:2] + (1,)} (or "
                         f"{t.shape[:2]}) for t {t}, got {scale} and {bias}")
    if scale.dtype != bias.dtype or not scale.dtype.is_floating_point:
        raise DTypeError(f"group_scale and group_bias must share a float dtype, got "
                         f"{scale.dtype} and {bias.dtype}")
    shape = (t.shape[0], t.shape[1] * t.shape[2] * 4)
    return TensorSpec(shape[::-1] if dim == 0 else shape, scale.dtype)


def _kernel(t: np.ndarray, scale: np.ndarray, bias: np.ndarray, dim: int) -> np.ndarray:
    """Any leading axes (the replica axis too); ``dim=0`` swaps the last two axes."""
    out = group_quantize_decompress_numpy(t, scale, bias, -1)
    return np.ascontiguousarray(np.swapaxes(out, -1, -2) if dim == 0 else out)


def _reference(t: np.ndarray, scale: np.ndarray, bias: np.ndarray, dim: int) -> np.ndarray:
    """Element by element, as the formula reads."""
    rows, groups, per = t.shape
    out = np.empty((rows, groups * per * 4), scale.dtype)
    for r, g, p in np.ndindex(t.shape):
        word = int(t[r, g, p])
        for q in range(4):
            code = (word >> (12 - 4 * q)) & 15
            out[r, g * 4 * per + 4 * p + q] = (scale.dtype.type(code) * scale[r, g, 0]
                                               + bias[r, g, 0])
    return out if dim in (-1, 1) else out.T


def _samples(rng: np.random.Generator) -> list[Sample]:
    def one(rows: int, groups: int, per: int) -> tuple[np.ndarray, ...]:
        t = rng.integers(0, 1 << 16, (rows, groups, per)).astype(np.uint16)
        return t, rng.uniform(0.01, 0.2, (rows, groups, 1)), rng.normal(size=(rows, groups, 1))

    return [Sample(one(2, 3, 2)), Sample(one(3, 2, 1), {"dim": 0})]


_DECOMPRESS = OpDef("group_quantize_decompress", _infer, _kernel, samples=_samples,
                    ref=_reference, replicated=unchanged(_kernel), cost=per_output(2))


@register(_DECOMPRESS)
def group_quantize_decompress(t: Tensor, group_scale: Tensor, group_bias: Tensor,
                              dim: int = -1) -> Tensor:
    """Decompress group-quantised ``t`` (uint16 ``(rows, groups, P)``, four 4-bit codes per
    element) with ``group_scale`` and ``group_bias`` (``(rows, groups, 1)`` or ``(rows,
    groups)``) into ``(rows, groups * P * 4)`` of the scale's dtype, computed in that dtype;
    ``dim=0`` puts the decompressed axis first (a transpose)."""
    if t.rank != 3:
        raise NotImplementedError(f"group_quantize_decompress: t must be rank 3 (rows, groups, "
                                  f"P), got {t.spec}")
    group_scale, group_bias = (x.reshape((*x.shape, 1)) if x.rank == 2 else x
                               for x in (group_scale, group_bias))
    if group_scale.shape[:2] != t.shape[:2] or group_bias.shape[:2] != t.shape[:2]:
        raise ValueError(f"group_quantize_decompress: the leading dims of group_scale "
                         f"{group_scale.spec} and group_bias {group_bias.spec} must be t's "
                         f"{t.shape[:2]}")
    if dim not in (-1, 0, 1):
        raise ValueError(f"group_quantize_decompress: dim must be -1, 0 or 1, got {dim}")
    return apply1(_DECOMPRESS, [t, group_scale, group_bias], {"dim": -1 if dim == 1 else dim})

