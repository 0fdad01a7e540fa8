"""Pooling: ``max_pool`` and ``average_pool`` over 1, 2 or 3 spatial dims, with gradients.

Both reductions are separable, so the forward pools one spatial dim at a time (``k`` strided
passes per dim instead of ``prod(k)``). ``average_pool`` divides by the number of taps inside
the unpadded input (ONNX's default ``count_include_pad=0``, torch's ``count_include_pad=False``).
``max_pool``'s gradient goes to the first maximal element of each window in row-major order,
as in torch. Kernels work through the batch a cache-sized chunk at a time (``map_chunks``, on
two threads when the Session allows).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from xlgraph.cost import Cost, CostFn, nelms, traffic
from xlgraph.errors import DTypeError, ShapeError
from xlgraph.op import OpDef, Sample, apply1, register, same_dtype
from xlgraph.ops.half import always_exact
from xlgraph.ops.replicas import batch_rule
from xlgraph.ops.window import (
    Ints,
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
    valid_counts,
)
from xlgraph.ops.window_parallel import max_pool_grad_loop, max_pool_loop
from xlgraph.tensor import Tensor, TensorSpec


# -- numpy kernels -----------------------------------------------------------------------------
def _sizes(in_sp: Ints, kernel: Ints, stride: Ints, pads: Ints, dilation: Ints,
           out: Ints) -> Ints:
    """Padded buffer size per dim: every window fits and the whole input is inside."""
    ext = extents(out, kernel, stride, dilation)
    return tuple(max(e, b + size) for e, b, size in zip(ext, pads, in_sp))


def _axis_taps(ndim: int, axis: int, k: int, s: int, d: int, o: int) -> Iterator[tuple]:
    """Index tuples of the ``k`` taps of a 1-D window along ``axis``."""
    index: list[Any] = [slice(None)] * ndim
    for t in range(k):
        index[axis] = slice(t * d, t * d + (o - 1) * s + 1, s)
        yield tuple(index)


def _separable(xp: np.ndarray, ufunc: np.ufunc, kernel: Ints, stride: Ints, dilation: Ints,
               y: np.ndarray) -> None:
    """Combine each window of ``xp`` with ``ufunc`` into ``y``, one spatial dim after another."""
    a, n = xp, len(kernel)
    for i, (k, s, d, o) in enumerate(zip(kernel, stride, dilation, y.shape[2:])):
        views = [a[tap] for tap in _axis_taps(a.ndim, a.ndim - n + i, k, s, d, o)]
        acc = y if i == n - 1 else np.empty(views[0].shape, a.dtype)
        if k == 1:
            np.copyto(acc, views[0])
        else:
            ufunc(views[0], views[1], out=acc)
        for view in views[2:]:
            ufunc(acc, view, out=acc)
        a = acc


def _pool(x: np.ndarray, ufunc: np.ufunc, fill: Any, kernel: Ints, stride: Ints, pads: Ints,
          dilation: Ints, y: np.ndarray) -> np.ndarray:
    """``ufunc`` over every window of ``x`` padded with ``fill`` into ``y``, a batch chunk at a
    time."""
    sizes = _sizes(x.shape[2:], kernel, stride, pads, dilation, y.shape[2:])

    def chunk(sl: slice) -> None:
        _separable(pad_to(x[sl], pads[:len(kernel)], sizes, fill), ufunc, kernel, stride,
                   dilation, y[sl])

    map_chunks(chunk, x.shape[0], _item_bytes(x))
    return y


def _pooled(x: np.ndarray, kernel: Ints, stride: Ints, pads: Ints, dilation: Ints,
            ceil_mode: bool) -> np.ndarray:
    """An uninitialised result for pooling ``x``."""
    out = out_shape(x.shape[2:], kernel, stride, pads, dilation, ceil_mode)
    return np.empty(x.shape[:2] + out, x.dtype)


def _item_bytes(x: np.ndarray) -> int:
    return int(np.prod(x.shape[1:])) * x.itemsize


def _lowest(dtype: np.dtype) -> Any:
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _max_pool_out(x: np.ndarray, out: np.ndarray, kernel: Ints, stride: Ints, pads: Ints,
                  dilation: Ints, ceil_mode: bool) -> np.ndarray:
    return _pool(x, np.maximum, _lowest(x.dtype), kernel, stride, pads, dilation, out)


def _max_pool(x: np.ndarray, kernel: Ints, stride: Ints, pads: Ints, dilation: Ints,
              ceil_mode: bool) -> np.ndarray:
    out = _pooled(x, kernel, stride, pads, dilation, ceil_mode)
    return _max_pool_out(x, out, kernel, stride, pads, dilation, ceil_mode)


def _first_max_grad(dy: np.ndarray, xp: np.ndarray, y: np.ndarray, index: tuple[tuple, ...],
                    overlap: bool, dxp: np.ndarray) -> None:
    """Route ``dy`` to the first maximum of each window of ``xp`` (taps in row-major order),
    writing the gradient of ``xp`` into ``dxp``."""
    dxp.fill(0)
    free = np.ones(y.shape, bool)
    for sl in index:
        hit = np.equal(xp[sl], y)
        hit &= free
        free ^= hit
        if overlap:
            dxp[sl] += dy * hit
        else:
            np.multiply(dy, hit, out=dxp[sl])


def _max_pool_grad_out(dy: np.ndarray, x: np.ndarray, y: np.ndarray, out: np.ndarray,
                       kernel: Ints, stride: Ints, pads: Ints, dilation: Ints,
                       ceil_mode: bool) -> np.ndarray:
    begins = pads[:len(kernel)]
    sizes = _sizes(x.shape[2:], kernel, stride, pads, dilation, y.shape[2:])
    index = taps(kernel, stride, dilation, y.shape[2:])
    overlap = any(s < (k - 1) * d + 1 for k, s, d in zip(kernel, stride, dilation))

    def chunk(sl: slice) -> None:
        xs = x[sl]
        xp = pad_to(xs, begins, sizes, _lowest(x.dtype))
        unpadded = xp is xs  # then the gradient goes straight into out
        dxp = out[sl] if unpadded else np.empty(xp.shape, dy.dtype)
        _first_max_grad(dy[sl], xp, y[sl], index, overlap, dxp)
        if not unpadded:
            out[sl] = crop(dxp, begins, x.shape[2:])

    map_chunks(chunk, x.shape[0], _item_bytes(x))
    return out


def _max_pool_grad(dy: np.ndarray, x: np.ndarray, y: np.ndarray, kernel: Ints, stride: Ints,
                   pads: Ints, dilation: Ints, ceil_mode: bool) -> np.ndarray:
    out = np.empty(x.shape, dy.dtype)
    return _max_pool_grad_out(dy, x, y, out, kernel, stride, pads, dilation, ceil_mode)


def _average_pool_out(x: np.ndarray, out: np.ndarray, kernel: Ints, stride: Ints, pads: Ints,
                      dilation: Ints, ceil_mode: bool) -> np.ndarray:
    _pool(x, np.add, 0, kernel, stride, pads, dilation, out)
    counts = valid_counts(x.shape[2:], kernel, stride, pads[:len(kernel)], dilation,
                          out.shape[2:])
    out /= counts.astype(x.dtype)
    return out


def _average_pool(x: np.ndarray, kernel: Ints, stride: Ints, pads: Ints, dilation: Ints,
                  ceil_mode: bool) -> np.ndarray:
    out = _pooled(x, kernel, stride, pads, dilation, ceil_mode)
    return _average_pool_out(x, out, kernel, stride, pads, dilation, ceil_mode)


def _average_pool_grad(dy: np.ndarray, kernel: Ints, stride: Ints, pads: Ints, dilation: Ints,
                       ceil_mode: bool, size: Ints) -> np.ndarray:
    out, n = dy.shape[2:], len(kernel)
    sizes = _sizes(size, kernel, stride, pads, dilation, out)
    d = dy / valid_counts(size, kernel, stride, pads[:n], dilation, out).astype(dy.dtype)
    for i in reversed(range(n)):  # undo the forward's per-dim passes, last dim first
        axis = d.ndim - n + i
        grown = np.zeros(d.shape[:axis] + (sizes[i],) + d.shape[axis + 1:], d.dtype)
        for tap in _axis_taps(d.ndim, axis, kernel[i], stride[i], dilation[i], out[i]):
            grown[tap] += d
        d = grown
    return np.ascontiguousarray(crop(d, pads[:n], size))


# -- inference ---------------------------------------------------------------------------------
def _pool_infer(x: TensorSpec, kernel: Ints, stride: Ints, pads: Ints, dilation: Ints,
                ceil_mode: bool) -> TensorSpec:
    n = len(x.shape) - 2
    if n < 1 or len(kernel) != n:
        raise ShapeError(f"need data (N, C, *spatial) with {len(kernel)} spatial dims, got {x}")
    check_positive(kernel_size=kernel, stride=stride, dilation=dilation)
    out = out_shape(x.shape[2:], kernel, stride, pads, dilation, ceil_mode)
    if valid_counts(x.shape[2:], kernel, stride, pads[:n], dilation, out).min() < 1:
        raise ShapeError(f"padding {pads} leaves windows of kernel {kernel} entirely outside "
                         f"the input")
    return TensorSpec(x.shape[:2] + out, x.dtype)


def _average_infer(x: TensorSpec, **attrs: Any) -> TensorSpec:
    if not x.dtype.is_floating_point:
        raise DTypeError(f"average_pool needs float data, got {x}")
    return _pool_infer(x, **attrs)


def _max_grad_infer(dy: TensorSpec, x: TensorSpec, y: TensorSpec, **attrs: Any) -> TensorSpec:
    same_dtype(dy, x, y)
    if _pool_infer(x, **attrs) != y or dy.shape != y.shape:
        raise ShapeError(f"max_pool of {x} gives {_pool_infer(x, **attrs)}, not {y} / {dy}")
    return x


def _avg_grad_infer(dy: TensorSpec, size: Ints, **attrs: Any) -> TensorSpec:
    x = TensorSpec(dy.shape[:2] + tuple(size), dy.dtype)
    if _pool_infer(x, **attrs) != dy:
        raise ShapeError(f"average_pool of {x} gives {_pool_infer(x, **attrs)}, not {dy}")
    return x


# -- samples -----------------------------------------------------------------------------------
_POOL_CASES = [
    ((2, 3, 6, 6), {"kernel_size": (2, 2), "stride": (2, 2)}),
    ((2, 2, 7, 9), {"kernel_size": (2, 2), "stride": (2, 2)}),
    ((1, 2, 5, 6), {"kernel_size": (2, 2), "stride": (2, 2), "ceil_mode": True}),
    ((2, 2, 7, 6), {"kernel_size": (3, 2)}),
    ((1, 2, 7, 7), {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 0, 1, 1),
                    "ceil_mode": True}),
    ((2, 2, 9), {"kernel_size": (3,), "stride": (2,), "dilation": (2,)}),
    ((1, 2, 6, 5), {"kernel_size": (2, 3), "stride": (2, 2), "auto_pad": "same_upper"}),
    ((2, 1, 7), {"kernel_size": (2,), "stride": (3,), "auto_pad": "same_lower",
                 "ceil_mode": True}),
    ((1, 1, 4, 5, 4), {"kernel_size": (2, 2, 2), "stride": (2, 1, 2)}),
]


def _pool_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample((rng.normal(size=shape),), kw) for shape, kw in _POOL_CASES]


def _geometry(kernel: Ints, stride: Ints, pads: Ints, dilation: Ints = (1, 1),
              ceil_mode: bool = False) -> dict[str, Any]:
    return {"kernel": kernel, "stride": stride, "pads": pads, "dilation": dilation,
            "ceil_mode": ceil_mode}


def _max_grad_samples(rng: np.random.Generator) -> list[Sample]:
    samples = []
    tied = rng.integers(0, 3, size=(2, 3, 7, 9)).astype(float)  # ties: the first max wins
    for x, geo in [(rng.normal(size=(2, 2, 6, 7)),
                    _geometry((3, 2), (2, 1), (1, 0, 0, 1), ceil_mode=True)),
                   (tied, _geometry((2, 2), (2, 2), (0, 0, 0, 0))),
                   (tied, _geometry((2, 2), (2, 2), (0, 0, 0, 0), ceil_mode=True))]:
        y = _max_pool(x, **geo)
        samples.append(Sample((rng.normal(size=y.shape), x, y), geo))
    return samples


def _avg_grad_samples(rng: np.random.Generator) -> list[Sample]:
    geo = _geometry((3, 2), (2, 1), (1, 0, 0, 1), ceil_mode=True)
    return [Sample((rng.normal(size=(2, 2, 3, 7)),), {**geo, "size": (6, 7)})]


# -- records and builders ----------------------------------------------------------------------
def _window_cost(pooled: int) -> CostFn:
    """One operation per window tap of every pooled element: tensor ``pooled`` of the inputs
    followed by the outputs (the pooled output, or ``dy`` for the gradients)."""

    def cost(ins: list[TensorSpec], outs: list[TensorSpec], kernel: Ints, **_: Any) -> Cost:
        return traffic(ins, outs, nelms((ins + outs)[pooled]) * math.prod(kernel))

    return cost



def _windows_apart(attrs: dict[str, Any]) -> bool:
    """No two pooling windows share an element: each input gets one gradient at most, so
    ``max_pool_grad``'s results are its gradient's elements (``OpDef.half_exact``)."""
    return all(s >= (k - 1) * d + 1
               for k, s, d in zip(attrs["kernel"], attrs["stride"], attrs["dilation"]))


_MAX_POOL = OpDef("max_pool", _pool_infer, _max_pool,
                  lambda g, dy: (max_pool_grad(dy, g.x(0), g.y(0), **g.attrs),),
                  kernel_out=_max_pool_out, samples=_pool_samples, cost=_window_cost(1),
                  threaded=True, replicated=batch_rule(_max_pool), loop=max_pool_loop,
                  widen_half=True, half_exact=always_exact)
_MAX_POOL_GRAD = OpDef("max_pool_grad", _max_grad_infer, _max_pool_grad,
                       kernel_out=_max_pool_grad_out, samples=_max_grad_samples,
                       cost=_window_cost(0), threaded=True,
                       replicated=batch_rule(_max_pool_grad, (0, 1, 2)), loop=max_pool_grad_loop,
                       widen_half=True, half_exact=_windows_apart)
_AVERAGE_POOL = OpDef("average_pool", _average_infer, _average_pool,
                      lambda g, dy: (average_pool_grad(dy, size=g.x(0).shape[2:], **g.attrs),),
                      kernel_out=_average_pool_out, samples=_pool_samples, cost=_window_cost(1),
                      threaded=True, replicated=batch_rule(_average_pool), widen_half=True)
_AVERAGE_POOL_GRAD = OpDef("average_pool_grad", _avg_grad_infer, _average_pool_grad,
                           samples=_avg_grad_samples, cost=_window_cost(0),
                           replicated=batch_rule(_average_pool_grad), widen_half=True)


@register(_MAX_POOL_GRAD)
def max_pool_grad(dy: Tensor, x: Tensor, y: Tensor, kernel: Ints, stride: Ints, pads: Ints,
                  dilation: Ints, ceil_mode: bool) -> Tensor:
    """Gradient of ``y = max_pool(x)``: each element of ``dy`` goes to the first maximum of its
    window (normalised geometry)."""
    return apply1(_MAX_POOL_GRAD, [dy, x, y], _geometry(kernel, stride, pads, dilation,
                                                        ceil_mode))


@register(_AVERAGE_POOL_GRAD)
def average_pool_grad(dy: Tensor, kernel: Ints, stride: Ints, pads: Ints, dilation: Ints,
                      ceil_mode: bool, size: Ints) -> Tensor:
    """Gradient of ``average_pool`` of data with spatial shape ``size`` (normalised geometry)."""
    attrs = {**_geometry(kernel, stride, pads, dilation, ceil_mode), "size": tuple(size)}
    return apply1(_AVERAGE_POOL_GRAD, [dy], attrs)


def _pool_attrs(t: Tensor, kernel_size: Any, stride: Any, padding: Any, out_pads: Any,
                dilation: Any, in_dilations: Any, auto_pad: str,
                ceil_mode: bool) -> dict[str, Any]:
    n = t.rank - 2
    if n < 1:
        raise ShapeError("need data (N, C, *spatial)")
    kernel = spatial(kernel_size, n, "kernel_size", 0)
    st, dil = spatial(stride, n, "stride", 1), spatial(dilation, n, "dilation", 1)
    check_positive(kernel_size=kernel, stride=st, dilation=dil)
    if set(spatial(in_dilations, n, "in_dilations", 1)) != {1} or any(out_pads or ()):
        raise ValueError("in_dilations and out_pads other than the defaults are not supported")
    pads = resolve_pads(t.shape[2:], kernel, st, dil, padding, auto_pad)
    return _geometry(kernel, st, pads, dil, bool(ceil_mode))


_POOL_DOC = """

    Args:
        t: data ``(N, C, *spatial)`` with 1, 2 or 3 spatial dims.
        kernel_size: window size per spatial dim.
        stride: window step per dim; **defaults to 1** (PopXL), not to ``kernel_size``.
        padding: ``(begin_0, ..., begin_n, end_0, ..., end_n)``; used when ``auto_pad`` is
            'not_set' ('valid': none; 'same_upper'/'same_lower': ``ceil(size / stride)``
            outputs, the odd padding element at the end/start).
        dilation: spacing of the window taps.
        ceil_mode: round the number of windows up (a window may not start in the end padding).
        out_pads, in_dilations: accepted for PopXL compatibility; only defaults are supported.

    Returns:
        ``(N, C, *out)``.

    Raises:
        ShapeError: when a window does not fit or lies entirely in the padding.
    """


@register(_MAX_POOL)
def max_pool(t: Tensor, kernel_size: Any, stride: Any = None, padding: Any = None,
             out_pads: Any = None, dilation: Any = None, in_dilations: Any = None,
             auto_pad: str = "not_set", ceil_mode: bool = False,
             storage_order: str = "row") -> Tensor:
    attrs = checked("max_pool", [t], lambda: _pool_attrs(
        t, kernel_size, stride, padding, out_pads, dilation, in_dilations, auto_pad, ceil_mode))
    return apply1(_MAX_POOL, [t], attrs)


@register(_AVERAGE_POOL)
def average_pool(t: Tensor, kernel_size: Any, stride: Any = None, padding: Any = None,
                 out_pads: Any = None, dilation: Any = None, in_dilations: Any = None,
                 auto_pad: str = "not_set", ceil_mode: bool = False) -> Tensor:
    attrs = checked("average_pool", [t], lambda: _pool_attrs(
        t, kernel_size, stride, padding, out_pads, dilation, in_dilations, auto_pad, ceil_mode))
    return apply1(_AVERAGE_POOL, [t], attrs)


max_pool.__doc__ = ("Max pooling; padding never wins (it is -inf). ``storage_order`` only "
                    "concerns ONNX's unused indices output." + _POOL_DOC)
average_pool.__doc__ = ("Average pooling; each window is divided by the number of its taps "
                        "inside the input (padding is not counted)." + _POOL_DOC)
