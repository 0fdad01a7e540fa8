"""Conversions of ATen's neural-network ops: matmuls, convolution, pooling, normalisation,
softmax, dropout and randomness, and the losses xlgraph runs as one op."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from xlgraph import dtypes, ops
from xlgraph.ops.indexing import take_along_axis
from xlgraph.poptorch.table import register
from xlgraph.poptorch.util import Unsupported, dims, pair, xlgraph_dtype
from xlgraph.tensor import Tensor, constant


# -- matrix products ---------------------------------------------------------------------------
@register("aten.mm.default", "aten.bmm.default", "aten.matmul.default", promote=True)
def _mm(ctx: Any, a: Tensor, b: Tensor) -> Tensor:
    return ops.matmul(a, b)


def _blas(batch_sum: bool) -> Any:
    """``beta * bias + alpha * (a @ b)``, the product summed over the batch for ``addbmm``; a
    term whose scale is 0 is not computed, so its NaNs do not propagate, as in torch."""
    def convert(ctx: Any, bias: Tensor, a: Tensor, b: Tensor, *, beta: Any = 1,
                alpha: Any = 1) -> Tensor:
        shape = tuple(ctx.val.shape)
        if alpha == 0:
            term = bias if beta == 1 else bias * beta
            if beta == 0:
                term = constant(np.zeros(shape, bias.dtype.as_numpy()))
            return term if term.shape == shape else ops.expand(term, shape)
        product = ops.matmul(a, b)
        product = ops.sum(product, 0) if batch_sum else product
        product = product if alpha == 1 else product * alpha
        if beta == 0:
            return product if product.shape == shape else ops.expand(product, shape)
        return product + (bias if beta == 1 else bias * beta)
    return convert


register("aten.addmm.default", "aten.addmv.default", "aten.baddbmm.default",
         promote=(0, 1, 2))(_blas(False))
register("aten.addbmm.default", promote=(0, 1, 2))(_blas(True))


# -- convolution and pooling -------------------------------------------------------------------
@register("aten.convolution.default", promote=(0, 1, 2))
def _convolution(ctx: Any, x: Tensor, weight: Tensor, bias: Tensor | None, stride: Any,
                 padding: Any, dilation: Any, transposed: bool, output_padding: Any,
                 groups: int) -> Tensor:
    n = x.rank - 2
    pads = pair(padding, n)
    if transposed:
        y = ops.conv_transpose(x, weight, stride=pair(stride, n), padding=pads + pads,
                               dilation=pair(dilation, n), groups=groups,
                               output_padding=pair(output_padding, n))
    else:
        y = ops.conv(x, weight, stride=pair(stride, n), padding=pads + pads,
                     dilation=pair(dilation, n), groups=groups)
    return y if bias is None else y + ops.reshape(bias, (1, -1) + (1,) * n)


def _pool_args(n: int, kernel_size: Any, stride: Any, padding: Any) -> tuple[Any, ...]:
    kernel = pair(kernel_size, n)
    strides = kernel if stride in (None, [], ()) else pair(stride, n)
    pads = pair(padding, n)
    return kernel, strides, pads + pads


def _batched(n: int, fn: Any) -> Any:
    """``fn`` run on an (N, C, spatial...) input; an unbatched (C, spatial...) one gets N = 1."""
    def convert(ctx: Any, x: Tensor, *args: Any, **kwargs: Any) -> Any:
        if x.rank == n + 2:
            return fn(n, x, *args, **kwargs)
        y = fn(n, ops.reshape(x, (1,) + x.shape), *args, **kwargs)
        first = y[0] if isinstance(y, tuple) else y
        first = ops.reshape(first, first.shape[1:])
        return (first, *y[1:]) if isinstance(y, tuple) else first
    return convert


def _max_pool(n: int, x: Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0,
              dilation: Any = 1, ceil_mode: bool = False) -> tuple[Tensor, None]:
    kernel, strides, pads = _pool_args(n, kernel_size, stride, padding)
    y = ops.max_pool(x, kernel, stride=strides, padding=pads, dilation=pair(dilation, n),
                     ceil_mode=ceil_mode)
    return y, None


def _avg_pool(n: int, x: Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0,
              ceil_mode: bool = False, count_include_pad: bool = True,
              divisor_override: Any = None) -> Tensor:
    kernel, strides, pads = _pool_args(n, kernel_size, stride, padding)
    if ceil_mode and count_include_pad and any(pads):
        raise Unsupported("ceil_mode=True with count_include_pad=True and padding")
    if divisor_override is not None or (count_include_pad and any(pads)):
        # sum pooling over the zero-padded input, then the fixed divisor
        padded = _zero_pad(x, pads[:n])
        total = ops.average_pool(padded, kernel, stride=strides, ceil_mode=ceil_mode) \
            * float(math.prod(kernel))
        return total * (1.0 / (divisor_override or math.prod(kernel)))
    return ops.average_pool(x, kernel, stride=strides, padding=pads, ceil_mode=ceil_mode)


for _n in (1, 2, 3):
    register(f"aten.max_pool{_n}d_with_indices.default")(_batched(_n, _max_pool))
    register(f"aten.avg_pool{_n}d.default")(_batched(_n, _avg_pool))


def _zero_pad(x: Tensor, pads: Sequence[int]) -> Tensor:
    n = len(pads)
    for i, p in enumerate(pads):
        if p:
            d = x.rank - n + i
            shape = x.shape[:d] + (p,) + x.shape[d + 1:]
            zeros = constant(np.zeros(shape, x.dtype.as_numpy()))
            x = ops.concat([zeros, x, zeros], d)
    return x


@register("aten._adaptive_avg_pool2d.default", "aten._adaptive_avg_pool3d.default",
          "aten.adaptive_avg_pool1d.default")
def _adaptive_avg_pool(ctx: Any, x: Tensor, output_size: Sequence[int]) -> Tensor:
    n = len(output_size)
    size = x.shape[-n:]
    out = tuple(int(o) for o in output_size)
    if all(s % o == 0 for s, o in zip(size, out)):
        kernel = tuple(s // o for s, o in zip(size, out))
        return ops.average_pool(x, kernel, stride=kernel)
    for i, (s, o) in enumerate(zip(size, out)):  # torch's uneven windows, one dim at a time
        d = x.rank - n + i
        windows = [ops.mean(ops.slice(x, [(j * s) // o], [-((-(j + 1) * s) // o)], [1], [d]),
                            d, keepdims=True) for j in range(o)]
        x = ops.concat(windows, d)
    return x


@register("aten.upsample_nearest2d.default", "aten.upsample_nearest2d.vec")
def _upsample_nearest(ctx: Any, x: Tensor, output_size: Any = None, scales_h: Any = None,
                      scales_w: Any = None) -> Tensor:
    """torch's nearest source index ``min(floor(dst * (1 / scale)), in - 1)`` in float32, with
    the given scale when there is one (not ``in / out``, which differs for fractional scales
    such as 5.00001 or 0.435714)."""
    out = tuple(int(s) for s in ctx.val.shape[2:])
    scales = list(scales_h) if isinstance(scales_h, list | tuple) else [scales_h, scales_w]
    for i, o in enumerate(out):
        d, n, scale = 2 + i, x.shape[2 + i], scales[i] if i < len(scales) else None
        ratio = np.float32(1.0 / scale) if scale else np.float32(n) / np.float32(o)
        index = np.arange(o) if o == n else \
            np.floor(np.arange(o, dtype=np.float32) * ratio).astype(np.int64)
        x = ops.gather(x, constant(np.minimum(index, n - 1).astype(np.int32)), d)
    return x


# -- softmax and normalisation -----------------------------------------------------------------
@register("aten._softmax.default")
def _softmax(ctx: Any, x: Tensor, dim: int, half_to_float: bool = False) -> Tensor:
    return ops.softmax(x, dims(dim, x.rank)[0]) if x.rank else x * 0.0 + 1.0


@register("aten._log_softmax.default")
def _log_softmax(ctx: Any, x: Tensor, dim: int, half_to_float: bool = False) -> Tensor:
    return ops.log_softmax(x, dims(dim, x.rank)[0]) if x.rank else x * 0.0


def _ones(c: int | tuple[int, ...], dtype: dtypes.dtype, value: float = 1.0) -> Tensor:
    return constant(np.full(c, value, dtype.as_numpy()))


def _channel(t: Tensor, rank: int) -> Tensor:
    return ops.reshape(t, (1, -1) + (1,) * (rank - 2))


@register("aten.native_layer_norm.default", promote=(0, 2, 3))
def _layer_norm(ctx: Any, x: Tensor, normalized_shape: Sequence[int], weight: Any, bias: Any,
                eps: float) -> tuple[Tensor, None, None]:
    shape = tuple(int(s) for s in normalized_shape)
    k = len(shape)
    if k == 1 and weight is not None and bias is not None:
        return ops.layer_norm(x, weight, bias, eps=eps), None, None
    axes = tuple(range(x.rank - k, x.rank))
    centred = x - ops.mean(x, axes, keepdims=True)
    y = centred / ops.sqrt(ops.mean(centred * centred, axes, keepdims=True) + eps)
    y = y if weight is None else y * weight
    return (y if bias is None else y + bias), None, None


@register("aten.native_group_norm.default", promote=(0, 1, 2))
def _group_norm(ctx: Any, x: Tensor, weight: Any, bias: Any, n: int, c: int, hxw: int,
                group: int, eps: float) -> tuple[Tensor, None, None]:
    w = weight if weight is not None else _ones(c, x.dtype)
    b = bias if bias is not None else _ones(c, x.dtype, 0.0)
    return ops.group_norm(x, w, b, num_groups=group, eps=eps), None, None


def _batch_stats(x: Tensor) -> tuple[Tensor, Tensor, tuple[int, ...]]:
    axes = (0,) + tuple(range(2, x.rank))
    mean = ops.mean(x, axes)
    centred = x - _channel(mean, x.rank)
    return mean, ops.mean(centred * centred, axes), axes


def _normalise(x: Tensor, mean: Tensor, var: Tensor, weight: Any, bias: Any,
               eps: float) -> Tensor:
    y = (x - _channel(mean, x.rank)) / ops.sqrt(_channel(var, x.rank) + eps)
    y = y if weight is None else y * _channel(weight, x.rank)
    return y if bias is None else y + _channel(bias, x.rank)


@register("aten._native_batch_norm_legit_functional.default", promote=(0, 1, 2))
def _batch_norm_train(ctx: Any, x: Tensor, weight: Any, bias: Any, running_mean: Tensor,
                      running_var: Tensor, training: bool, momentum: float,
                      eps: float) -> tuple[Any, ...]:
    if not training:
        return (*_batch_norm_eval(ctx, x, weight, bias, running_mean, running_var, momentum,
                                  eps), running_mean, running_var)
    mean, var, _ = _batch_stats(x)
    y = _normalise(x, mean, var, weight, bias, eps)
    count = x.nelms // x.shape[1]
    unbiased = ops.detach(var) * (count / max(count - 1, 1))
    new_mean = running_mean * (1 - momentum) + ops.cast(ops.detach(mean), running_mean.dtype) \
        * momentum
    new_var = running_var * (1 - momentum) + ops.cast(unbiased, running_var.dtype) * momentum
    return y, None, None, new_mean, new_var


@register("aten.native_batch_norm.default", promote=(0, 1, 2))
def _native_batch_norm(ctx: Any, x: Tensor, weight: Any, bias: Any, running_mean: Any,
                       running_var: Any, training: bool, momentum: float,
                       eps: float) -> tuple[Any, ...]:
    """The in-place form (from ``make_fx``): running statistics are reported as updates."""
    if running_mean is None:
        return _batch_norm_no_stats(ctx, x, weight, bias, training, momentum, eps)
    y, _, _, new_mean, new_var = _batch_norm_train(ctx, x, weight, bias, running_mean,
                                                   running_var, training, momentum, eps)
    if training:
        ctx.mutate(3, new_mean)
        ctx.mutate(4, new_var)
    return y, None, None


@register("aten._native_batch_norm_legit.no_stats", promote=(0, 1, 2))
def _batch_norm_no_stats(ctx: Any, x: Tensor, weight: Any, bias: Any, training: bool,
                         momentum: float, eps: float) -> tuple[Any, ...]:
    mean, var, _ = _batch_stats(x)
    return _normalise(x, mean, var, weight, bias, eps), None, None


@register("aten._native_batch_norm_legit_no_training.default", promote=(0, 1, 2))
def _batch_norm_eval(ctx: Any, x: Tensor, weight: Any, bias: Any, running_mean: Tensor,
                     running_var: Tensor, momentum: float, eps: float) -> tuple[Any, ...]:
    c = x.shape[1]
    w = weight if weight is not None else _ones(c, x.dtype)
    b = bias if bias is not None else _ones(c, x.dtype, 0.0)
    mean = ops.cast(running_mean, x.dtype) if running_mean.dtype != x.dtype else running_mean
    var = ops.cast(running_var, x.dtype) if running_var.dtype != x.dtype else running_var
    return ops.batch_norm_inference(x, w, b, mean, var, epsilon=eps), None, None


# -- dropout and random samplers ---------------------------------------------------------------
@register("aten.native_dropout.default")
def _dropout(ctx: Any, x: Tensor, p: float, train: bool | None) -> tuple[Tensor, None]:
    if not train or p == 0 or not ctx.training:
        return x, None
    return ops.dropout(x, ctx.next_seed(), p), None


def _spec(ctx: Any) -> tuple[tuple[int, ...], dtypes.dtype]:
    return tuple(int(s) for s in ctx.val.shape), xlgraph_dtype(ctx.val.dtype)


@register("aten.rand.default", "aten.rand_like.default")
def _rand(ctx: Any, *args: Any, **_: Any) -> Tensor:
    shape, dtype = _spec(ctx)
    return ops.random_uniform(ctx.next_seed(), shape, 0.0, 1.0, dtype)


@register("aten.randn.default", "aten.randn_like.default")
def _randn(ctx: Any, *args: Any, **_: Any) -> Tensor:
    shape, dtype = _spec(ctx)
    return ops.random_normal(ctx.next_seed(), shape, 0.0, 1.0, dtype)


@register("aten.randint.default", "aten.randint.low", "aten.randint_like.default",
          "aten.randint_like.low_dtype")
def _randint(ctx: Any, *args: Any, **_: Any) -> Tensor:
    """Integers uniform in ``[low, high)``: the floor of a uniform float draw."""
    shape, dtype = _spec(ctx)
    bounds = [a for a in args if isinstance(a, int) and not isinstance(a, bool)]
    low, high = (0, bounds[0]) if ctx.node.target.__name__.split(".")[-1] == "default" \
        else bounds[:2]
    draw = ops.random_uniform(ctx.next_seed(), shape, float(low), float(high), dtypes.float32)
    return ops.cast(ops.minimum(ops.floor(draw), float(high - 1)), dtype)


@register("aten.uniform.default")
def _uniform(ctx: Any, x: Tensor, low: float = 0.0, high: float = 1.0, **_: Any) -> Tensor:
    return ops.random_uniform(ctx.next_seed(), x.shape, low, high, x.dtype)


@register("aten.normal.Tensor_Tensor", "aten.normal.Tensor_float", "aten.normal.float_Tensor",
          "aten.normal_functional.default")
def _normal(ctx: Any, mean: Any, std: Any = 1.0, **_: Any) -> Tensor:
    shape, dtype = _spec(ctx)
    if isinstance(mean, Tensor) and ctx.node.target.__name__.startswith("normal_functional"):
        mean, std = 0.0, 1.0 if not isinstance(std, float | int) else std  # normal_(x, m, s)
    return ops.random_normal(ctx.next_seed(), shape, 0.0, 1.0, dtype) * std + mean


@register("aten.bernoulli.p", "aten.bernoulli.default")
def _bernoulli(ctx: Any, x: Tensor, p: Any = None, **_: Any) -> Tensor:
    shape, dtype = _spec(ctx)
    probability = x if p is None else p
    draw = ops.random_uniform(ctx.next_seed(), shape, 0.0, 1.0, dtype)
    return ops.cast(ops.less(draw, probability), dtype)


@register("aten.exponential.default")
def _exponential(ctx: Any, x: Tensor, lambd: float = 1.0, **_: Any) -> Tensor:
    draw = ops.random_uniform(ctx.next_seed(), x.shape, 0.0, 1.0, x.dtype)
    return -ops.log1p(-draw) * (1.0 / lambd)


# -- losses xlgraph runs as one op -------------------------------------------------------------
_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


@register("aten.nll_loss_forward.default", "aten.nll_loss2d_forward.default")
def _nll_loss(ctx: Any, x: Tensor, target: Tensor, weight: Any, reduction: int,
              ignore_index: int) -> tuple[Tensor, None]:
    labels = target if target.dtype == dtypes.int32 else ops.cast(target, dtypes.int32)
    if x.rank > 2:  # (N, C, d...) -> (N * d..., C)
        perm = (0,) + tuple(range(2, x.rank)) + (1,)
        x = ops.reshape(ops.transpose(x, perm), (-1, x.shape[1]))
        labels = ops.reshape(labels, (-1,))
    elif x.rank == 1:
        x, labels = ops.reshape(x, (1, -1)), ops.reshape(labels, (1,))
    mode = _REDUCTIONS[reduction]
    if weight is None:
        loss = ops.nll_loss(x, labels, ignore_index=ignore_index, reduction=mode, log_prob=True)
        return (ops.reshape(loss, ctx.val[0].shape) if mode == "none" else loss), None
    # weighted: sum(w[t] * -x[t]) / sum(w[t]) over the items not ignored
    valid = ops.not_equal(labels, ignore_index)
    safe = ops.where(valid, labels, 0)
    picked = ops.reshape(take_along_axis(x, ops.reshape(safe, (-1, 1)), 1), (-1,))
    w = ops.where(valid, ops.gather(weight, safe, 0), 0.0)
    per_item = -picked * w
    if mode == "none":
        return ops.reshape(per_item, ctx.val[0].shape), None
    total = ops.sum(per_item)
    return (total if mode == "sum" else total / ops.sum(w)), None


@register("xlgraph_poptorch.identity_loss.default")
def _identity_loss(ctx: Any, x: Tensor, reduction: int) -> Tensor:
    return ops.sum(x) if reduction == 0 else ops.mean(x) if reduction == 1 else x


@register("aten.randperm.default")
def _randperm(ctx: Any, n: int, **_: Any) -> Tensor:
    """A permutation: the order that sorts ``n`` uniform draws."""
    draws = ops.random_uniform(ctx.next_seed(), (n,), 0.0, 1.0, dtypes.float32)
    return ops.topk(draws, n, 0)[1]


@register("xlgraph_poptorch.ctc_loss.default")
def _ctc_loss(ctx: Any, log_probs: Tensor, targets: Tensor, input_lengths: Tensor,
              target_lengths: Tensor, blank: int, reduction: int,
              zero_infinity: bool) -> Tensor:
    if log_probs.rank == 2:  # one unbatched sequence
        log_probs = ops.reshape(log_probs, (log_probs.shape[0], 1, log_probs.shape[1]))
        targets, input_lengths, target_lengths = (ops.reshape(targets, (1, -1)),
                                                  ops.reshape(input_lengths, (1,)),
                                                  ops.reshape(target_lengths, (1,)))
    if targets.rank != 2:
        raise Unsupported("concatenated 1-D targets (their split depends on the data)")
    lengths = [t if t.dtype == dtypes.int32 else ops.cast(t, dtypes.int32)
               for t in (targets, input_lengths, target_lengths)]
    per = ops.ctc_loss(log_probs, *lengths, blank=blank)
    # torch's gradient treats log_probs as log_softmax outputs: it adds exp(log_probs) over the
    # steps used; this term has that gradient and the value 0
    steps = constant(np.arange(log_probs.shape[0], dtype=np.int32).reshape(-1, 1))
    used = ops.cast(ops.less(steps, lengths[1]), log_probs.dtype)
    e = ops.exp(log_probs) * ops.reshape(used, used.shape + (1,))
    per = per + ops.sum(e - ops.detach(e), (0, 2))
    if zero_infinity:
        per = ops.where(ops.isinf(per), 0.0, per)
    if reduction == 1:
        per = per / ops.cast(ops.maximum2(lengths[2], 1), per.dtype)
        return ops.mean(per)
    return ops.sum(per) if reduction == 2 else per
