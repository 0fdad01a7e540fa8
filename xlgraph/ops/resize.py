"""``interpolate``: nearest-neighbour resizing (ONNX Resize)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from xlgraph.errors import ShapeError
from xlgraph.op import OpDef, Sample, apply1, register
from xlgraph.tensor import Tensor, TensorSpec

__all__ = ["interpolate"]


# -- interpolate (ONNX Resize, nearest) ------------------------------------------------------
_COORDINATES = {
    "half_pixel": lambda o, scale, n_in, n_out: (o + 0.5) / scale - 0.5,
    "pytorch_half_pixel": lambda o, scale, n_in, n_out: (
        (o + 0.5) / scale - 0.5 if n_out > 1 else np.zeros_like(o)),
    "asymmetric": lambda o, scale, n_in, n_out: o / scale,
    "tf_half_pixel_for_nn": lambda o, scale, n_in, n_out: (o + 0.5) / scale,
    "align_corners": lambda o, scale, n_in, n_out: (
        o * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros_like(o)),
}
_ROUNDING = {
    "round_prefer_floor": lambda c: np.ceil(c - 0.5),
    "round_prefer_ceil": lambda c: np.floor(c + 0.5),
    "floor": np.floor,
    "ceil": np.ceil,
}


def _source_rows(n_in: int, scale: float, nearest_mode: str, mode: str) -> np.ndarray:
    """For each output position along one axis, the input position nearest to it."""
    n_out = int(np.floor(n_in * scale))
    coords = _COORDINATES[mode](np.arange(n_out, dtype=np.float64), scale, n_in, n_out)
    return np.clip(_ROUNDING[nearest_mode](coords), 0, n_in - 1).astype(np.intp)


def _interpolate_infer(t: TensorSpec, scale_factor: tuple[float, ...], nearest_mode: str,
                       coordinate_transformation_mode: str) -> TensorSpec:
    if len(scale_factor) != len(t.shape) or min(scale_factor, default=1) <= 0:
        raise ShapeError(f"need one positive scale factor per axis of {t}, got {scale_factor}")
    shape = tuple(int(np.floor(d * s)) for d, s in zip(t.shape, scale_factor))
    return TensorSpec(shape, t.dtype)


def _interpolate(x: np.ndarray, scale_factor: tuple[float, ...], nearest_mode: str,
                 coordinate_transformation_mode: str) -> np.ndarray:
    rows = [_source_rows(n, s, nearest_mode, coordinate_transformation_mode)
            for n, s in zip(x.shape, scale_factor)]
    return x[np.ix_(*rows)]


def _interpolate_ref(x: np.ndarray, scale_factor: tuple[float, ...], nearest_mode: str,
                     coordinate_transformation_mode: str) -> np.ndarray:
    """Per output element: transform each coordinate, round it, clamp it, read the input."""
    shape = tuple(int(np.floor(d * s)) for d, s in zip(x.shape, scale_factor))
    out = np.zeros(shape, x.dtype)
    transform = _COORDINATES[coordinate_transformation_mode]
    for pos in np.ndindex(*shape):
        src = []
        for o, n_in, n_out, s in zip(pos, x.shape, shape, scale_factor):
            c = float(_ROUNDING[nearest_mode](np.float64(transform(o, s, n_in, n_out))))
            src.append(min(max(int(c), 0), n_in - 1))
        out[pos] = x[tuple(src)]
    return out


def _interpolate_grad_infer(dy: TensorSpec, shape: tuple[int, ...], **_: Any) -> TensorSpec:
    return TensorSpec(shape, dy.dtype)


def _interpolate_grad(dy: np.ndarray, shape: tuple[int, ...], scale_factor: tuple[float, ...],
                      nearest_mode: str, coordinate_transformation_mode: str) -> np.ndarray:
    """Sum each output gradient into the input element it was read from, one axis at a time."""
    g = dy
    for axis, (n_in, s) in enumerate(zip(shape, scale_factor)):
        rows = _source_rows(n_in, s, nearest_mode, coordinate_transformation_mode)
        acc = np.zeros(g.shape[:axis] + (n_in,) + g.shape[axis + 1:], dy.dtype)
        np.add.at(np.moveaxis(acc, axis, 0), rows, np.moveaxis(g, axis, 0))
        g = acc
    return g


_INTERPOLATE_GRAD = OpDef(
    "interpolate_grad", _interpolate_grad_infer, _interpolate_grad,
    samples=lambda rng: [Sample((rng.normal(size=(1, 2, 6, 3)),),
                                {"shape": (1, 2, 3, 2), "scale_factor": (1.0, 1.0, 2.0, 1.5),
                                 "nearest_mode": "round_prefer_floor",
                                 "coordinate_transformation_mode": "half_pixel"})],
)


def _interpolate_samples(rng: np.random.Generator) -> list[Sample]:
    x = rng.normal(size=(1, 2, 3, 4))
    return [Sample((x,), {"scale_factor": (1.0, 1.0, 2.0, 2.0)}),
            Sample((x,), {"scale_factor": (1.0, 1.0, 1.5, 0.5), "nearest_mode": "floor",
                          "coordinate_transformation_mode": "asymmetric"}),
            Sample((x,), {"scale_factor": (1.0, 2.0, 2.5, 1.75),
                          "nearest_mode": "round_prefer_ceil",
                          "coordinate_transformation_mode": "align_corners"}),
            Sample((rng.normal(size=(3, 5)),), {"scale_factor": (3.0, 0.6), "nearest_mode": "ceil",
                                                "coordinate_transformation_mode":
                                                    "tf_half_pixel_for_nn"})]


_INTERPOLATE = OpDef(
    "interpolate", _interpolate_infer, _interpolate,
    lambda g, dy: (apply1(_INTERPOLATE_GRAD, [dy], {"shape": g.x(0).shape, **g.attrs}),),
    ref=_interpolate_ref, samples=_interpolate_samples,
)


@register(_INTERPOLATE)
def interpolate(t: Tensor, scale_factor: Sequence[float] = (1.0, 1.0, 1.0, 1.0),
                mode: str = "nearest", nearest_mode: str = "round_prefer_floor",
                coordinate_transformation_mode: str = "half_pixel") -> Tensor:
    """Resize ``t`` by ``scale_factor`` (one per axis; output size ``floor(n * scale)``) with
    nearest-neighbour sampling (ONNX Resize).

    Raises:
        NotImplementedError: for ``mode`` other than ``"nearest"`` (PopXL also has linear/cubic).
        ValueError: for an unknown ``nearest_mode`` or ``coordinate_transformation_mode``.
    """
    if mode != "nearest":
        raise NotImplementedError(
            f"interpolate: mode {mode!r} is not supported by xlgraph; only 'nearest' is")
    if nearest_mode not in _ROUNDING:
        raise ValueError(f"interpolate: nearest_mode must be one of {sorted(_ROUNDING)}, "
                         f"got {nearest_mode!r}")
    if coordinate_transformation_mode not in _COORDINATES:
        raise ValueError("interpolate: coordinate_transformation_mode must be one of "
                         f"{sorted(_COORDINATES)}, got {coordinate_transformation_mode!r}")
    attrs = {"scale_factor": tuple(float(s) for s in scale_factor), "nearest_mode": nearest_mode,
             "coordinate_transformation_mode": coordinate_transformation_mode}
    return apply1(_INTERPOLATE, [t], attrs)
