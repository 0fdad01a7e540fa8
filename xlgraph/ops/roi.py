"""``roi_align``: average of bilinear samples over a grid of bins in each region of interest
(ONNX RoiAlign, 'avg' mode)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from xlgraph.errors import ShapeError
from xlgraph.op import OpDef, Sample, apply, apply1, register, same_dtype
from xlgraph.ops.indexing import as_index_tensor, check_int_indices
from xlgraph.tensor import Tensor, TensorSpec

__all__ = ["roi_align"]


def _axis_weights(start: float, extent: float, bins: int, grid: int,
                  size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Linear-interpolation weights along one axis for the ``bins * grid`` sample positions
    ``start + extent * frac`` (zero rows for samples more than one pixel outside the map).

    Returns ``(w, dw, frac)``: ``w`` and its derivative ``dw`` with respect to the position are
    ``(bins * grid, size)``; ``frac`` gives each sample's place in the box.
    """
    frac_in_box = ((np.arange(bins)[:, None] + (np.arange(grid) + 0.5) / grid) / bins).ravel()
    pos = start + extent * frac_in_box
    inside = ((pos >= -1.0) & (pos <= size)).astype(np.float64)
    moving = inside * (pos >= 0)  # clamped to 0 below zero: the weights stop moving
    pos = np.clip(pos, 0.0, None)
    low = np.minimum(np.floor(pos).astype(np.int64), size - 1)
    high = np.minimum(low + 1, size - 1)
    at_edge = low >= size - 1
    frac = np.where(at_edge, 0.0, pos - low)
    moving = moving * ~at_edge
    w = np.zeros((pos.size, size))
    dw = np.zeros((pos.size, size))
    rows = np.arange(pos.size)
    np.add.at(w, (rows, low), (1 - frac) * inside)
    np.add.at(w, (rows, high), frac * inside)
    np.add.at(dw, (rows, low), -moving)
    np.add.at(dw, (rows, high), moving)
    return w, dw, frac_in_box


def _box_axis(lo: float, hi: float, bins: int, size: int, spatial_scale: float,
              sampling_ratio: int, aligned: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One axis of a box: bin weights ``(bins, size)`` and their derivatives with respect to
    the box's two coordinates on this axis."""
    offset = 0.5 if aligned else 0.0
    start, extent = lo * spatial_scale - offset, (hi - lo) * spatial_scale
    clamped = not aligned and extent < 1.0
    if clamped:
        extent = 1.0
    grid = sampling_ratio if sampling_ratio > 0 else max(math.ceil(extent / bins), 1)
    w, dw, frac = _axis_weights(start, extent, bins, grid, size)
    # a sample at ``frac`` of the box moves by 1 - frac with its start and frac with its end
    # (a clamped box moves with its start only)
    by_lo = np.ones_like(frac) if clamped else 1.0 - frac
    by_hi = np.zeros_like(frac) if clamped else frac
    d_lo, d_hi = (dw * f[:, None] * spatial_scale for f in (by_lo, by_hi))
    return tuple(a.reshape(bins, grid, size).mean(1) for a in (w, d_lo, d_hi))


def _roi_weights(roi: np.ndarray, out: tuple[int, int], hw: tuple[int, ...], spatial_scale: float,
                 sampling_ratio: int, aligned: bool) -> tuple[tuple[np.ndarray, ...], ...]:
    """``(wy, dwy_y1, dwy_y2), (wx, dwx_x1, dwx_x2)`` for one box ``(x1, y1, x2, y2)``."""
    x1, y1, x2, y2 = (float(v) for v in roi)
    return (_box_axis(y1, y2, out[0], hw[0], spatial_scale, sampling_ratio, aligned),
            _box_axis(x1, x2, out[1], hw[1], spatial_scale, sampling_ratio, aligned))


def _roi_infer(t: TensorSpec, rois: TensorSpec, batch_index: TensorSpec,
               output_size: tuple[int, int], spatial_scale: float, sampling_ratio: int,
               aligned: bool) -> TensorSpec:
    same_dtype(t, rois)
    check_int_indices(batch_index, "batch_index")
    n = rois.shape[0] if rois.shape else -1
    if len(t.shape) != 4 or rois.shape != (n, 4) or batch_index.shape != (n,):
        raise ShapeError(f"roi_align needs data (N, C, H, W), rois (R, 4) and batch_index (R,), "
                         f"got {t}, {rois}, {batch_index}")
    return TensorSpec((n, t.shape[1], *output_size), t.dtype)


def _roi_align(x: np.ndarray, rois: np.ndarray, batch_index: np.ndarray,
               output_size: tuple[int, int], spatial_scale: float, sampling_ratio: int,
               aligned: bool) -> np.ndarray:
    out = np.empty((len(rois), x.shape[1], *output_size), x.dtype)
    for r, (roi, b) in enumerate(zip(rois, batch_index)):
        (wy, _, _), (wx, _, _) = _roi_weights(roi, output_size, x.shape[2:], spatial_scale,
                                              sampling_ratio, aligned)
        out[r] = wy @ x[b] @ wx.T  # separable: bilinear weights are products of 1-D ones
    return out


def _roi_align_ref(x: np.ndarray, rois: np.ndarray, batch_index: np.ndarray,
                   output_size: tuple[int, int], spatial_scale: float, sampling_ratio: int,
                   aligned: bool) -> np.ndarray:
    """Point by point, following the ONNX RoiAlign reference."""
    height, width = x.shape[2:]
    out = np.zeros((len(rois), x.shape[1], *output_size))
    offset = 0.5 if aligned else 0.0
    for r, (roi, b) in enumerate(zip(rois, batch_index)):
        x1, y1, x2, y2 = (float(v) * spatial_scale - offset for v in roi)
        rh, rw = y2 - y1, x2 - x1
        if not aligned:
            rh, rw = max(rh, 1.0), max(rw, 1.0)
        bh, bw = rh / output_size[0], rw / output_size[1]
        gh = sampling_ratio if sampling_ratio > 0 else max(math.ceil(rh / output_size[0]), 1)
        gw = sampling_ratio if sampling_ratio > 0 else max(math.ceil(rw / output_size[1]), 1)
        for ph in range(output_size[0]):
            for pw in range(output_size[1]):
                acc = np.zeros(x.shape[1])
                for iy in range(gh):
                    for ix in range(gw):
                        y = y1 + ph * bh + (iy + 0.5) * bh / gh
                        xx = x1 + pw * bw + (ix + 0.5) * bw / gw
                        if y < -1.0 or y > height or xx < -1.0 or xx > width:
                            continue
                        y, xx = max(y, 0.0), max(xx, 0.0)
                        yl, xl = min(int(y), height - 1), min(int(xx), width - 1)
                        yh, xh = min(yl + 1, height - 1), min(xl + 1, width - 1)
                        ly = 0.0 if yl >= height - 1 else y - yl
                        lx = 0.0 if xl >= width - 1 else xx - xl
                        acc += ((1 - ly) * (1 - lx) * x[b, :, yl, xl] + (1 - ly) * lx
                                * x[b, :, yl, xh] + ly * (1 - lx) * x[b, :, yh, xl]
                                + ly * lx * x[b, :, yh, xh])
                out[r, :, ph, pw] = acc / (gh * gw)
    return out.astype(x.dtype)


def _roi_align_grad_infer(dy: TensorSpec, x: TensorSpec, rois: TensorSpec,
                          batch_index: TensorSpec, **_: Any) -> tuple[TensorSpec, TensorSpec]:
    return x, rois


def _roi_align_grad(dy: np.ndarray, x: np.ndarray, rois: np.ndarray, batch_index: np.ndarray,
                    output_size: tuple[int, int], spatial_scale: float, sampling_ratio: int,
                    aligned: bool) -> tuple[np.ndarray, np.ndarray]:
    """Gradients for the data (the adjoint of the bin weights) and for the boxes (through the
    sample positions; the adaptive grid size is locally constant)."""
    dx, drois = np.zeros_like(x), np.zeros_like(rois)
    for r, (roi, b) in enumerate(zip(rois, batch_index)):
        (wy, wy1, wy2), (wx, wx1, wx2) = _roi_weights(roi, output_size, x.shape[2:],
                                                      spatial_scale, sampling_ratio, aligned)
        dx[b] += wy.T @ dy[r] @ wx
        rows, cols = x[b] @ wx.T, wy @ x[b]  # (C, H, out_w) and (C, out_h, W)
        drois[r] = [np.sum(dy[r] * (cols @ wx1.T)), np.sum(dy[r] * (wy1 @ rows)),
                    np.sum(dy[r] * (cols @ wx2.T)), np.sum(dy[r] * (wy2 @ rows))]
    return dx, drois


def _rois(rng: np.random.Generator, n: int, size: float) -> np.ndarray:
    corner = rng.uniform(-1, size - 2, (n, 2))
    return np.concatenate([corner, corner + rng.uniform(1, size / 2, (n, 2))], 1)


_ROI_ALIGN_GRAD = OpDef(
    "roi_align_grad", _roi_align_grad_infer, _roi_align_grad,
    samples=lambda rng: [Sample((rng.normal(size=(3, 2, 2, 3)), rng.normal(size=(2, 2, 7, 8)),
                                 _rois(rng, 3, 8), rng.integers(0, 2, (3,))),
                                {"output_size": (2, 3), "spatial_scale": 1.0,
                                 "sampling_ratio": 2, "aligned": True})],
)
_ROI_ALIGN = OpDef(
    "roi_align", _roi_infer, _roi_align,
    lambda g, dy: (*roi_align_grad(dy, g.x(0), g.x(1), g.x(2), **g.attrs), None),
    ref=_roi_align_ref,
    samples=lambda rng: [
        Sample((rng.normal(size=(2, 3, 8, 9)), _rois(rng, 4, 8), rng.integers(0, 2, (4,))),
               {"output_size": (2, 3), "spatial_scale": 1.0, "sampling_ratio": 2}),
        Sample((rng.normal(size=(1, 2, 10, 10)), _rois(rng, 3, 20), np.zeros(3, np.int64)),
               {"output_size": (3, 3), "spatial_scale": 0.5, "sampling_ratio": 0,
                "aligned": False}),
    ],
)


@register(_ROI_ALIGN_GRAD)
def roi_align_grad(dy: Tensor, t: Tensor, rois: Tensor, batch_index: Tensor,
                   **attrs: Any) -> tuple[Tensor, Tensor]:
    """The gradients of ``roi_align`` for its data and its boxes (not differentiable again)."""
    dx, drois = apply(_ROI_ALIGN_GRAD, [dy, t, rois, batch_index], attrs)
    return dx, drois


@register(_ROI_ALIGN)
def roi_align(t: Tensor, rois: Tensor, batch_index: Any, output_size: Sequence[int],
              spatial_scale: float, sampling_ratio: int, *, aligned: bool = True) -> Tensor:
    """Pool each region of interest of ``t`` into ``output_size`` bins (ONNX RoiAlign, 'avg').

    Args:
        t: feature maps ``(N, C, H, W)``.
        rois: ``(R, 4)`` boxes ``(x1, y1, x2, y2)`` in input coordinates.
        batch_index: ``(R,)`` integers: the image of each box.
        output_size: ``(out_h, out_w)``.
        spatial_scale: multiplies the box coordinates (the feature map's scale).
        sampling_ratio: samples per bin along each axis; 0 adapts to the box size.
        aligned: shift boxes by half a pixel (True, 'half_pixel') or not (False, when boxes
            are also at least one pixel wide).

    Returns:
        ``(R, C, out_h, out_w)``; gradients flow to ``t`` and ``rois``.
    """
    attrs = {"output_size": tuple(int(s) for s in output_size),
             "spatial_scale": float(spatial_scale), "sampling_ratio": int(sampling_ratio),
             "aligned": bool(aligned)}
    return apply1(_ROI_ALIGN, [t, rois, as_index_tensor(batch_index)], attrs)
