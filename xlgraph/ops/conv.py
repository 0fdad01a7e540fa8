"""Convolution: ``conv``, ``conv_transpose`` and the weight gradient ``conv_grad_weight``.

Data is ``(N, C, *spatial)`` with 1, 2 or 3 spatial dims; a ``conv`` weight is
``(M, C / groups, *kernel)``. All three ops share one geometry (``stride``, ``pads`` as
``begins + ends``, ``dilation``, ``groups``) seen from the convolution's side, so each is the
other's gradient: conv's input gradient is a conv_transpose, conv_transpose's is a conv.
Kernels work through the batch a cache-sized chunk at a time (``map_chunks``, on two threads
when the Session allows, see ``xlgraph.runtime.threads``): ``conv`` and
``conv_grad_weight`` copy the chunk's patches (im2col on a strided view) and multiply;
``conv_transpose`` multiplies first and then adds the taps' contributions into the result
(col2im), channels-last so that each add runs over long rows. The im2col copy runs over the
innermost axis of its source: with more channels than output columns (and one group) the data is
first made channels-last, so that the copy runs over channels and the whole chunk is one matmul
(``window.channels_last``).

Over 400 lines: the three ops are one geometry (each one's gradient is another of them), so
their records, shape checks and kernels stay together.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
from numpy.lib.stride_tricks import as_strided

from xlgraph.cost import Cost, CostFn, nelms, traffic
from xlgraph.errors import ShapeError
from xlgraph.op import OpDef, Sample, apply1, register, same_dtype
from xlgraph.ops.loops import Composite, float_only
from xlgraph.ops.replicas import batch_rule
from xlgraph.ops.window import (
    Ints,
    channels_last,
    check_positive,
    checked,
    crop,
    extents,
    map_chunks,
    out_shape,
    pad_to,
    resolve_pads,
    spatial,
    taps,
    windows,
)
from xlgraph.ops.window_loops import col2im_2d
from xlgraph.ops.window_parallel import conv_grad_weight_loop, conv_loop, conv_transpose_loop
from xlgraph.tensor import Tensor, TensorSpec

PadType = Literal["not_set", "same_upper", "same_lower", "valid"]  # pad_type values


# -- numpy kernels -----------------------------------------------------------------------------
def _patches(x: np.ndarray, kernel: Ints, stride: Ints, pads: Ints,
             dilation: Ints) -> tuple[np.ndarray, Ints]:
    """A read-only view ``(N, C, *kernel, *out)`` of the windows of ``x`` (the im2col matrix
    before its copy: rows are (channel, tap) pairs), and the output shape."""
    n = len(kernel)
    out = out_shape(x.shape[2:], kernel, stride, pads, dilation)
    xp = pad_to(x, pads[:n], extents(out, kernel, stride, dilation), 0)
    view = windows(xp, kernel, stride, dilation, out)  # (N, C, *out, *kernel)
    return view.transpose(0, 1, *range(2 + n, 2 + 2 * n), *range(2, 2 + n)), out


def _channels_last_patches(x: np.ndarray, kernel: Ints, stride: Ints, pads: Ints,
                           dilation: Ints, out: Ints) -> np.ndarray:
    """A read-only view ``(N, *out, *kernel, C)`` of the windows of ``x`` made channels-last:
    each row of the im2col matrix (one position) is the window's taps, channels innermost."""
    n = len(kernel)
    xp = pad_to(x, pads[:n], extents(out, kernel, stride, dilation), 0)
    xh = np.ascontiguousarray(np.moveaxis(xp, 1, -1))  # (N, *padded, C)
    st = xh.strides
    strides = (st[0], *(a * s for a, s in zip(st[1:-1], stride)),
               *(a * d for a, d in zip(st[1:-1], dilation)), st[-1])
    return as_strided(xh, (x.shape[0], *out, *kernel, x.shape[1]), strides, writeable=False)


def _taps_last(w: np.ndarray) -> np.ndarray:
    """A weight ``(M, C, *kernel)`` as the matrix ``(M, kernel taps x C)`` that multiplies
    ``_channels_last_patches`` rows."""
    return np.moveaxis(w, 1, -1).reshape(w.shape[0], -1)


def _grouped(a: np.ndarray, groups: int, positions: int) -> np.ndarray:
    """A batch ``(B, rows, ...)`` as ``(B, groups, rows / groups, positions)``."""
    return a.reshape(a.shape[0], groups, -1, positions)


def _conv_out(x: np.ndarray, w: np.ndarray, out: np.ndarray, stride: Ints, pads: Ints,
              dilation: Ints, groups: int) -> np.ndarray:
    # copy a chunk's patches, then one matmul per item and group writes (B, M, positions)
    # into ``out`` (C-contiguous, as the buffer pool's are)
    m, k, p = w.shape[0], x.shape[1] * int(np.prod(w.shape[2:])), int(np.prod(out.shape[2:]))
    if channels_last(x.shape[1], groups, out.shape[2:], w.shape[2:], stride, dilation):
        rows = _channels_last_patches(x, w.shape[2:], stride, pads, dilation, out.shape[2:])
        w_t = _taps_last(w).T

        def chunk_last(sl: slice) -> None:  # (B positions, K) @ (K, M), then (B, M, positions)
            b = sl.stop - sl.start
            res = np.ascontiguousarray(rows[sl]).reshape(b * p, k) @ w_t
            out[sl].reshape(b, m, p)[...] = res.reshape(b, p, m).transpose(0, 2, 1)

        map_chunks(chunk_last, x.shape[0], max(k, m) * p * x.itemsize)
        return out
    patches, _ = _patches(x, w.shape[2:], stride, pads, dilation)
    wg = w.reshape(groups, m // groups, -1)

    def chunk(sl: slice) -> None:
        cols = _grouped(np.ascontiguousarray(patches[sl]), groups, p)
        np.matmul(wg, cols, out=_grouped(out[sl], groups, p))

    map_chunks(chunk, x.shape[0], max(k, m) * p * x.itemsize)
    return out


def _conv(x: np.ndarray, w: np.ndarray, stride: Ints, pads: Ints, dilation: Ints,
          groups: int) -> np.ndarray:
    sp = out_shape(x.shape[2:], w.shape[2:], stride, pads, dilation)
    y = np.empty((x.shape[0], w.shape[0], *sp), x.dtype)
    return _conv_out(x, w, y, stride, pads, dilation, groups)


def _conv_transpose(x: np.ndarray, w: np.ndarray, stride: Ints, pads: Ints, dilation: Ints,
                    groups: int, size: Ints) -> np.ndarray:
    dx = np.empty((x.shape[0], w.shape[1] * groups, *size), x.dtype)
    return _conv_transpose_out(x, w, dx, stride, pads, dilation, groups, size)


def _col2im(cols: np.ndarray, buf: np.ndarray, index: tuple[tuple, ...], spatial: Ints) -> None:
    """Zero ``buf`` (B, groups, *padded, C / g), then add each tap's contribution
    ``cols[:, t]`` (B, groups, positions, C / g) at the tap's windows, tap by tap."""
    buf.fill(0)
    for t, tap in enumerate(index):
        buf[(*tap, slice(None))] += cols[:, t].reshape(buf.shape[:2] + spatial + buf.shape[-1:])


def _conv_transpose_out(x: np.ndarray, w: np.ndarray, out: np.ndarray, stride: Ints, pads: Ints,
                        dilation: Ints, groups: int, size: Ints,
                        col2im: Callable[..., None] | None = None) -> np.ndarray:
    # Per item, group and tap, a matmul of the item's data seen transposed (positions, M / g)
    # by the tap's weights (M / g, C / g) gives that tap's contribution channels-last; col2im
    # adds them a tap at a time into a padded channels-last buffer, each add running over
    # rows of positions x channels instead of short spatial rows. The compiled backend passes
    # a loop for the adds (``col2im(cols, buf, *geometry)``, the same additions in the same
    # order: numpy's strided adds took 142 us where the loop takes 36, batch 8 of the MNIST CNN).
    n, m, p = len(size), x.shape[1], int(np.prod(x.shape[2:]))
    index = taps(w.shape[2:], stride, dilation, x.shape[2:])
    cg = w.shape[1]
    wt = np.ascontiguousarray(w.reshape(groups, m // groups, cg, -1).transpose(3, 0, 1, 2))
    sizes = tuple(o + pads[i] + pads[n + i] for i, o in enumerate(size))

    def chunk(sl: slice) -> None:
        xt = _grouped(x[sl], groups, p)[:, None].swapaxes(-1, -2)  # (B, 1, groups, p, M / g)
        cols = np.matmul(xt, wt)  # (B, taps, groups, p, C / g)
        buf = np.empty((cols.shape[0], groups, *sizes, cg), x.dtype)
        if col2im is None:
            _col2im(cols, buf, index, x.shape[2:])
        else:
            col2im(cols, buf, *x.shape[2:], *w.shape[2:], *stride, *dilation)
        moved = np.moveaxis(buf, -1, 2)  # (B, groups, C / g, *sizes), a view
        out[sl].reshape(moved.shape[:3] + size)[...] = crop(moved, pads[:n], size)

    map_chunks(chunk, x.shape[0], len(index) * p * groups * cg * x.itemsize)
    return out


def _conv_transpose_loop(ins: list[TensorSpec], **attrs: Any) -> Any:
    """The compiled backend's form of ``conv_transpose`` for float data with two spatial
    dims: the parallel loop for one group (``window_parallel``), else the numpy kernel with
    ``window_loops.col2im_2d`` for its adds."""
    if len(attrs["size"]) != 2 or float_only(ins[0], col2im_2d) is None:
        return None
    return (conv_transpose_loop(ins, **attrs)
            or (Composite(_conv_transpose_out, attrs, {"col2im": col2im_2d}), ()))


def _conv_grad_weight(dy: np.ndarray, x: np.ndarray, stride: Ints, pads: Ints, dilation: Ints,
                      groups: int, kernel: Ints) -> np.ndarray:
    out = np.empty((dy.shape[1], x.shape[1] // groups, *kernel), x.dtype)
    return _conv_grad_weight_out(dy, x, out, stride, pads, dilation, groups, kernel)


def _conv_grad_weight_out(dy: np.ndarray, x: np.ndarray, out: np.ndarray, stride: Ints,
                          pads: Ints, dilation: Ints, groups: int, kernel: Ints) -> np.ndarray:
    sp = out_shape(x.shape[2:], kernel, stride, pads, dilation)
    m, k, p = dy.shape[1], x.shape[1] * int(np.prod(kernel)), int(np.prod(sp))
    if channels_last(x.shape[1], groups, sp, kernel, stride, dilation):
        rows = _channels_last_patches(x, kernel, stride, pads, dilation, sp)

        def chunk_last(sl: slice) -> np.ndarray:  # (M, B positions) @ (B positions, K)
            b = sl.stop - sl.start
            dy_t = np.ascontiguousarray(dy[sl].reshape(b, m, p).transpose(1, 0, 2))
            return dy_t.reshape(m, b * p) @ np.ascontiguousarray(rows[sl]).reshape(b * p, k)

        parts = map_chunks(chunk_last, x.shape[0], max(k, m) * p * x.itemsize)
        dw = parts[0]
        for part in parts[1:]:
            dw += part  # in chunk order, however the chunks ran
        out[...] = np.moveaxis(dw.reshape(m, *kernel, x.shape[1]), -1, 1)
        return out
    # copy a chunk's patches, one matmul per item and group, summed over the items; the
    # transposed product (patches @ dy.T) is the faster orientation for BLAS
    patches, _ = _patches(x, kernel, stride, pads, dilation)
    dw_t = np.zeros((groups, k // groups, m // groups), x.dtype)

    def chunk(sl: slice) -> np.ndarray:
        cols = _grouped(np.ascontiguousarray(patches[sl]), groups, p)
        return np.matmul(cols, _grouped(dy[sl], groups, p).swapaxes(-1, -2)).sum(axis=0)

    for part in map_chunks(chunk, x.shape[0], max(k, m) * p * x.itemsize):
        dw_t += part  # in chunk order, however the chunks ran
    out.reshape(groups, m // groups, -1)[...] = dw_t.swapaxes(-1, -2)
    return out


# -- inference ---------------------------------------------------------------------------------
def _check(x: TensorSpec, w: TensorSpec, stride: Ints, dilation: Ints, groups: int) -> None:
    same_dtype(x, w)
    if len(x.shape) < 3 or len(w.shape) != len(x.shape):
        raise ShapeError(f"need data (N, C, *spatial) and a weight of the same rank, got {x} "
                         f"and {w}")
    check_positive(stride=stride, dilation=dilation, groups=(groups,))
    if w.shape[0] % groups:
        raise ShapeError(f"weight dim 0 ({w.shape[0]}) is not divisible by groups={groups}")


def _conv_infer(x: TensorSpec, w: TensorSpec, stride: Ints, pads: Ints, dilation: Ints,
                groups: int) -> TensorSpec:
    _check(x, w, stride, dilation, groups)
    if x.shape[1] != w.shape[1] * groups:
        raise ShapeError(f"data has {x.shape[1]} channels but the weight expects "
                         f"{w.shape[1]} per group x {groups} groups")
    out = out_shape(x.shape[2:], w.shape[2:], stride, pads, dilation)
    return TensorSpec((x.shape[0], w.shape[0], *out), x.dtype)


def _conv_transpose_infer(x: TensorSpec, w: TensorSpec, stride: Ints, pads: Ints,
                          dilation: Ints, groups: int, size: Ints) -> TensorSpec:
    _check(x, w, stride, dilation, groups)
    if x.shape[1] != w.shape[0]:
        raise ShapeError(f"data has {x.shape[1]} channels but the weight has {w.shape[0]}")
    if min(size) < 1 or out_shape(size, w.shape[2:], stride, pads, dilation) != x.shape[2:]:
        raise ShapeError(f"output spatial shape {size} is not one that a convolution with these "
                         f"settings maps back onto {x.shape[2:]}")
    return TensorSpec((x.shape[0], w.shape[1] * groups, *size), x.dtype)


def _grad_weight_infer(dy: TensorSpec, x: TensorSpec, stride: Ints, pads: Ints, dilation: Ints,
                       groups: int, kernel: Ints) -> TensorSpec:
    same_dtype(dy, x)
    out = out_shape(x.shape[2:], kernel, stride, pads, dilation)
    if (len(dy.shape) != len(x.shape) or dy.shape[0] != x.shape[0] or dy.shape[2:] != out
            or dy.shape[1] % groups or x.shape[1] % groups):
        raise ShapeError(f"gradient {dy} does not match data {x} convolved to {out}")
    return TensorSpec((dy.shape[1], x.shape[1] // groups, *kernel), x.dtype)


# -- gradient rules ----------------------------------------------------------------------------
def _geometry(attrs: dict[str, Any]) -> dict[str, Any]:
    return {k: attrs[k] for k in ("stride", "pads", "dilation", "groups")}


def _conv_grad(g: Any, dy: Tensor) -> tuple[Tensor, Tensor]:
    x, w = g.x(0), g.x(1)
    geo = _geometry(g.attrs)
    dx = apply1(_CONV_TRANSPOSE, [dy, w], {**geo, "size": x.shape[2:]})
    return dx, conv_grad_weight(dy, x, kernel=w.shape[2:], **geo)


def _conv_transpose_grad(g: Any, dy: Tensor) -> tuple[Tensor, Tensor]:
    x, w = g.x(0), g.x(1)
    geo = _geometry(g.attrs)
    return apply1(_CONV, [dy, w], geo), conv_grad_weight(x, dy, kernel=w.shape[2:], **geo)


# -- samples -----------------------------------------------------------------------------------
def _normal(rng: np.random.Generator, *shapes: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    return tuple(rng.normal(size=s) for s in shapes)


def _conv_samples(rng: np.random.Generator) -> list[Sample]:
    cases = [
        ((2, 3, 7, 6), (4, 3, 3, 2), {}),
        ((2, 3, 7, 8), (4, 3, 3, 3), {"stride": (2, 1), "padding": (1, 0, 2, 1),
                                      "dilation": (1, 2)}),
        ((2, 4, 6, 5), (6, 2, 3, 3), {"stride": (2, 2), "groups": 2, "pad_type": "same_upper"}),
        ((2, 3, 9), (4, 3, 3), {"stride": (2,), "padding": (1, 2), "dilation": (2,)}),
        ((1, 3, 8), (3, 1, 4), {"stride": (3,), "groups": 3, "pad_type": "same_lower"}),
        ((2, 2, 5, 5), (3, 2, 2, 2), {"padding": (1, 1, 1, 1), "pad_type": "valid"}),
        ((1, 2, 4, 5, 4), (3, 2, 2, 3, 2), {"stride": (1, 2, 1), "padding": (1, 0, 0, 0, 1, 1)}),
        # more channels than output columns: im2col through channels-last data
        ((3, 6, 5, 4), (4, 6, 3, 3), {}),
        ((2, 7, 6, 7), (3, 7, 2, 3), {"stride": (2, 2), "padding": (1, 0, 0, 1),
                                      "dilation": (1, 2)}),
        ((2, 5, 6), (4, 5, 3), {"stride": (2,), "padding": (1, 0)}),
    ]
    return [Sample(_normal(rng, xs, ws), kw) for xs, ws, kw in cases]


def _conv_transpose_samples(rng: np.random.Generator) -> list[Sample]:
    cases = [
        ((2, 3, 4, 5), (3, 2, 3, 3), {"stride": (2, 2), "padding": (1, 0, 0, 1),
                                      "output_padding": (1, 0)}),
        ((1, 4, 3, 3), (4, 3, 2, 2), {"dilation": (2, 1), "groups": 2}),
        ((2, 2, 5), (2, 3, 3), {"stride": (3,), "pad_type": "same_upper"}),
        ((1, 2, 3, 3), (2, 2, 3, 3), {"stride": (2, 2), "output_shape": (6, 7)}),
        ((1, 2, 2, 3, 2), (2, 1, 2, 2, 2), {"stride": (2, 1, 2), "padding": (0, 1, 0, 1, 0, 0)}),
    ]
    return [Sample(_normal(rng, xs, ws), kw) for xs, ws, kw in cases]


def _grad_weight_samples(rng: np.random.Generator) -> list[Sample]:
    geo = {"stride": (2, 1), "pads": (1, 0, 0, 1), "dilation": (1, 1), "groups": 1,
           "kernel": (3, 2)}
    grouped = {"stride": (1,), "pads": (1, 1), "dilation": (2,), "groups": 2, "kernel": (3,)}
    last = {"stride": (1, 2), "pads": (0, 1, 1, 0), "dilation": (2, 1), "groups": 1,
            "kernel": (2, 3)}  # 6 channels, 1 output column: channels-last
    return [Sample(_normal(rng, (2, 4, 3, 5), (2, 3, 6, 5)), geo),
            Sample(_normal(rng, (2, 4, 5), (2, 6, 7)), grouped),
            Sample(_normal(rng, (3, 4, 5, 1), (3, 6, 6, 3)), last)]


# -- records and builders ----------------------------------------------------------------------
def macs(per: int, weight: int) -> CostFn:
    """A cost of two flops for each element of tensor ``per`` (of the inputs followed by the
    outputs) times the size of one slice of tensor ``weight`` (all but its first axis)."""

    def cost(ins: list[TensorSpec], outs: list[TensorSpec], **_: Any) -> Cost:
        slice_size = math.prod((ins + outs)[weight].shape[1:])
        return traffic(ins, outs, 2 * nelms((ins + outs)[per]) * slice_size, matrix=True)

    return cost


# conv: every output element takes (C / groups) x kernel products with the weight (input 1);
# conv_transpose: every input element spreads over (C_out / groups) x kernel outputs;
# conv_grad_weight: every dy element meets (C_in / groups) x kernel patch elements (the output)
_CONV = OpDef("conv", _conv_infer, _conv, _conv_grad, kernel_out=_conv_out,
              loop=conv_loop, samples=_conv_samples, cost=macs(per=2, weight=1), threaded=True,
              replicated=batch_rule(_conv), widen_half=True)
_CONV_TRANSPOSE = OpDef("conv_transpose", _conv_transpose_infer, _conv_transpose,
                        _conv_transpose_grad, kernel_out=_conv_transpose_out,
                        loop=_conv_transpose_loop, samples=_conv_transpose_samples,
                        cost=macs(per=0, weight=1), threaded=True,
                        replicated=batch_rule(_conv_transpose), widen_half=True)
_CONV_GRAD_WEIGHT = OpDef("conv_grad_weight", _grad_weight_infer, _conv_grad_weight,
                          kernel_out=_conv_grad_weight_out, loop=conv_grad_weight_loop,
                          samples=_grad_weight_samples,
                          cost=macs(per=0, weight=2),
                          threaded=True, replicated=batch_rule(_conv_grad_weight, (0, 1), True),
                          widen_half=True)


@register(_CONV_GRAD_WEIGHT)
def conv_grad_weight(dy: Tensor, x: Tensor, stride: Ints, pads: Ints, dilation: Ints,
                     groups: int, kernel: Ints) -> Tensor:
    """Gradient of ``conv(x, w)`` with respect to ``w`` (of spatial size ``kernel``) given the
    output gradient ``dy``; the geometry is already normalised."""
    attrs = {"stride": tuple(stride), "pads": tuple(pads), "dilation": tuple(dilation),
             "groups": int(groups), "kernel": tuple(kernel)}
    return apply1(_CONV_GRAD_WEIGHT, [dy, x], attrs)


def planning_hints(available_memory_proportions: Any, partials_types: Any,
                   enable_conv_dithering: Any) -> dict[str, Any]:
    """PopXL's convolution planning arguments as ``op.hints`` entries."""
    return {"available_memory_proportion": available_memory_proportions,
            "partials_type": partials_types, "enable_conv_dithering": enable_conv_dithering}


def _strides(t: Tensor, weight: Tensor, stride: Any, dilation: Any) -> tuple[int, Ints, Ints]:
    n = t.rank - 2
    if n < 1 or weight.rank != t.rank:
        raise ShapeError("need data (N, C, *spatial) and a weight of the same rank")
    st, dil = spatial(stride, n, "stride", 1), spatial(dilation, n, "dilation", 1)
    check_positive(stride=st, dilation=dil)
    return n, st, dil


def _conv_attrs(t: Tensor, weight: Tensor, stride: Any, padding: Any, dilation: Any,
                groups: int, pad_type: str) -> dict[str, Any]:
    _, st, dil = _strides(t, weight, stride, dilation)
    pads = resolve_pads(t.shape[2:], weight.shape[2:], st, dil, padding, pad_type)
    return {"stride": st, "pads": pads, "dilation": dil, "groups": int(groups)}


@register(_CONV)
def conv(t: Tensor, weight: Tensor, stride: Any = (1, 1), padding: Any = (0, 0, 0, 0),
         dilation: Any = (1, 1), groups: int = 1, pad_type: str = "not_set",
         available_memory_proportions: Any = None, partials_types: Any = None,
         enable_conv_dithering: Any = None, *, available_memory_proportion: Any = None,
         partials_type: Any = None) -> Tensor:
    """Convolution (cross-correlation, as in ONNX/PopXL) of ``t`` with ``weight``.

    Args:
        t: data ``(N, C, *spatial)`` with 1, 2 or 3 spatial dims.
        weight: ``(M, C / groups, *kernel)``.
        stride, dilation: one int per spatial dim (an int, or PopXL's 2-D default, broadcasts).
        padding: ``(begin_0, ..., begin_n, end_0, ..., end_n)``, used when ``pad_type`` is
            'not_set'; 'valid' means no padding, 'same_upper'/'same_lower' pad so that the
            output has ``ceil(size / stride)`` positions, the odd element at the end/start.
        groups: channel groups.
        available_memory_proportions, partials_types, enable_conv_dithering: PopXL's planning
            arguments (the singular spellings are accepted too), recorded in ``op.hints`` for
            the ipu_model; no effect on values.

    Returns:
        ``(N, M, *out)`` where ``out = (size + pads - dilation * (kernel - 1) - 1) // stride + 1``.

    Raises:
        ShapeError: for mismatched ranks/channels or a window larger than the padded input.
    """
    attrs = checked("conv", [t, weight], lambda: _conv_attrs(t, weight, stride, padding,
                                                             dilation, groups, pad_type))
    hints = planning_hints(available_memory_proportions or available_memory_proportion,
                           partials_types or partials_type, enable_conv_dithering)
    return apply1(_CONV, [t, weight], attrs, hints=hints)


def _transpose_attrs(t: Tensor, weight: Tensor, stride: Any, padding: Any, dilation: Any,
                     groups: int, pad_type: str, output_padding: Any,
                     output_shape: Any) -> dict[str, Any]:
    n, st, dil = _strides(t, weight, stride, dilation)
    extra = spatial(output_padding or None, n, "output_padding", 0)
    if any(not 0 <= e < s for e, s in zip(extra, st)):
        raise ShapeError(f"output_padding {extra} must be in [0, stride {st})")
    full = [s * (i - 1) + e + (k - 1) * d + 1
            for i, e, k, s, d in zip(t.shape[2:], extra, weight.shape[2:], st, dil)]
    if output_shape or pad_type in ("same_upper", "same_lower"):
        target = (spatial(output_shape, n, "output_shape", -1) if output_shape
                  else tuple(i * s for i, s in zip(t.shape[2:], st)))
        total = [f - o for f, o in zip(full, target)]
        if min(total) < 0:
            raise ShapeError(f"output shape {target} is larger than {tuple(full)}, the most "
                             f"this transposed convolution produces; add output_padding")
        first = [p // 2 if pad_type == "same_upper" else p - p // 2 for p in total]
        pads = tuple(first) + tuple(p - f for p, f in zip(total, first))
    else:
        pads = resolve_pads(t.shape[2:], weight.shape[2:], st, dil, padding, pad_type)
    out = tuple(f - pads[i] - pads[n + i] for i, f in enumerate(full))
    return {"stride": st, "pads": pads, "dilation": dil, "groups": int(groups), "size": out}


@register(_CONV_TRANSPOSE)
def conv_transpose(t: Tensor, weight: Tensor, stride: Any = (1, 1),
                   padding: Any = (0, 0, 0, 0), dilation: Any = (1, 1), groups: int = 1,
                   pad_type: str = "not_set", output_padding: Any = (), output_shape: Any = (),
                   available_memory_proportions: Any = None, partials_types: Any = None,
                   enable_conv_dithering: Any = None, *, available_memory_proportion: Any = None,
                   partials_type: Any = None) -> Tensor:
    """Transposed convolution (ONNX ConvTranspose): the input gradient of ``conv``.

    Args:
        t: data ``(N, C, *spatial)``.
        weight: ``(C, M / groups, *kernel)``.
        stride, padding, dilation, groups, pad_type: as for ``conv``; ``padding`` removes
            rows from the output.
        output_padding: extra rows at the end of each output dim (each < stride).
        output_shape: explicit output spatial shape; the padding is then derived (for
            'same_upper' the odd row is cut at the end, otherwise at the start).
        available_memory_proportions, partials_types, enable_conv_dithering: as for
            ``conv``.

    Returns:
        ``(N, M, *out)`` with ``out = stride * (size - 1) + output_padding
        + dilation * (kernel - 1) + 1 - pads``; 'same_*' pad types give ``size * stride``.
    """
    attrs = checked("conv_transpose", [t, weight], lambda: _transpose_attrs(
        t, weight, stride, padding, dilation, groups, pad_type, output_padding, output_shape))
    hints = planning_hints(available_memory_proportions or available_memory_proportion,
                           partials_types or partials_type, enable_conv_dithering)
    return apply1(_CONV_TRANSPOSE, [t, weight], attrs, hints=hints)
