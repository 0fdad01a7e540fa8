"""torch operations written with xlgraph ops, with torch's argument names and defaults.

Each function takes xlgraph tensors where torch takes tensors (Python numbers pass through), and
``ctx`` (the ``Lowering`` in progress) when it needs parameters, randomness or loss marking. The
conversion table in ``xlgraph.poptorch.table`` maps torch targets to these functions.
"""

from __future__ import annotations

import math
from collections import namedtuple
from collections.abc import Sequence
from typing import Any

import numpy as np

from xlgraph import dtypes, ops
from xlgraph.tensor import Tensor, constant


class Unsupported(Exception):
    """An argument value the conversion does not handle (reported with the torch op's name)."""


def _pair(v: Any, n: int = 2) -> tuple[int, ...]:
    return (int(v),) * n if isinstance(v, int | np.integer) else tuple(int(x) for x in v)


def _dim(d: int, rank: int) -> int:
    return d + rank if d < 0 else d


def _dims(dim: Any, rank: int) -> tuple[int, ...] | None:
    if dim is None:
        return None
    return tuple(_dim(d, rank) for d in ((dim,) if isinstance(dim, int) else dim))


def _shape_args(shape: tuple[Any, ...]) -> tuple[int, ...]:
    """``view(-1, 3)`` or ``view((-1, 3))`` as one tuple of ints."""
    if len(shape) == 1 and isinstance(shape[0], tuple | list):
        shape = tuple(shape[0])
    return tuple(int(s) for s in shape)


# -- layers ------------------------------------------------------------------------------------
def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    y = x @ weight.T
    return y if bias is None else y + bias


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    if isinstance(padding, str):
        if padding != "valid":
            raise Unsupported(f"padding={padding!r}")
        padding = 0
    ph, pw = _pair(padding)
    y = ops.conv(x, weight, stride=_pair(stride), padding=(ph, pw, ph, pw),
                 dilation=_pair(dilation), groups=groups)
    return y if bias is None else y + bias.reshape((1, -1, 1, 1))


def max_pool2d(x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
               dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = False) -> Tensor:
    if return_indices:
        raise Unsupported("return_indices=True")
    kernel = _pair(kernel_size)
    ph, pw = _pair(padding)
    return ops.max_pool(x, kernel, stride=kernel if stride in (None, []) else _pair(stride),
                        padding=(ph, pw, ph, pw), dilation=_pair(dilation), ceil_mode=ceil_mode)


def avg_pool2d(x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:
    ph, pw = _pair(padding)
    if divisor_override is not None or (count_include_pad and (ph or pw)):
        raise Unsupported("divisor_override, or count_include_pad=True with padding")
    kernel = _pair(kernel_size)
    return ops.average_pool(x, kernel, stride=kernel if stride in (None, []) else _pair(stride),
                            padding=(ph, pw, ph, pw), ceil_mode=ceil_mode)


def adaptive_avg_pool2d(x: Tensor, output_size: Any) -> Tensor:
    size = x.shape[2:]
    out = tuple(s if o is None else o for s, o in zip(size, _pair(output_size)
                                                    if output_size is not None else size))
    if any(s % o for s, o in zip(size, out)):
        raise Unsupported(f"an output size {out} that does not divide the input size {size}")
    kernel = tuple(s // o for s, o in zip(size, out))
    return ops.average_pool(x, kernel, stride=kernel)


def _channel_view(t: Tensor, rank: int) -> Tensor:
    return t.reshape((1, -1) + (1,) * (rank - 2))


def batch_norm(ctx: Any, x: Tensor, running_mean: Any, running_var: Any, weight: Any = None,
               bias: Any = None, training: bool = False, momentum: float = 0.1,
               eps: float = 1e-5, stats: tuple[Any, Any] | None = None) -> Tensor:
    """Batch norm over axis 1; in training, ``stats`` (the torch buffers) get running updates."""
    c = x.shape[1]
    w = weight if weight is not None else constant(np.ones(c, np.float32))
    b = bias if bias is not None else constant(np.zeros(c, np.float32))
    if not training and running_mean is not None:
        return ops.batch_norm_inference(x, w, b, running_mean, running_var, epsilon=eps)
    axes = (0,) + tuple(range(2, x.rank))
    mean = ops.mean(x, axes)
    centred = x - _channel_view(mean, x.rank)
    var = ops.mean(centred * centred, axes)
    y = centred / ops.sqrt(_channel_view(var, x.rank) + eps)
    y = y * _channel_view(w, x.rank) + _channel_view(b, x.rank)
    if training and stats is not None and running_mean is not None:
        count = x.nelms // c
        unbiased = ops.detach(var) * (count / max(count - 1, 1))
        ctx.update_buffer(stats[0], running_mean * (1 - momentum) + ops.detach(mean) * momentum)
        ctx.update_buffer(stats[1], running_var * (1 - momentum) + unbiased * momentum)
    return y


def group_norm(x: Tensor, num_groups: int, weight: Any = None, bias: Any = None,
               eps: float = 1e-5) -> Tensor:
    c = x.shape[1]
    w = weight if weight is not None else constant(np.ones(c, np.float32))
    b = bias if bias is not None else constant(np.zeros(c, np.float32))
    return ops.group_norm(x, w, b, num_groups=num_groups, eps=eps)


def layer_norm(x: Tensor, normalized_shape: Any, weight: Any = None, bias: Any = None,
               eps: float = 1e-5) -> Tensor:
    shape = _pair(normalized_shape, 1)
    if len(shape) != 1:
        raise Unsupported(f"normalized_shape {shape} over more than the last dim")
    w = weight if weight is not None else constant(np.ones(shape, np.float32))
    b = bias if bias is not None else constant(np.zeros(shape, np.float32))
    return ops.layer_norm(x, w, b, eps=eps)


def dropout(ctx: Any, x: Tensor, p: float = 0.5, training: bool = True,
            inplace: bool = False) -> Tensor:
    if not (training and ctx.training) or p == 0:
        return x
    return ops.dropout(x, ctx.next_seed(), p)


def embedding(x: Tensor, weight: Tensor, padding_idx: Any = None, max_norm: Any = None,
              norm_type: float = 2.0, scale_grad_by_freq: bool = False,
              sparse: bool = False) -> Tensor:
    if padding_idx is not None or max_norm is not None or scale_grad_by_freq:
        raise Unsupported("padding_idx, max_norm or scale_grad_by_freq")
    return ops.gather(weight, x, axis=0)


# -- activations -------------------------------------------------------------------------------
def softmax(x: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
    if dim is None:
        raise Unsupported("softmax without dim")
    return ops.softmax(x, _dim(dim, x.rank))


def log_softmax(x: Tensor, dim: int | None = None, _stacklevel: int = 3,
                dtype: Any = None) -> Tensor:
    if dim is None:
        raise Unsupported("log_softmax without dim")
    return ops.log_softmax(x, _dim(dim, x.rank))


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    return ops.gelu(x) if approximate == "tanh" else ops.geluerf(x)


def relu(x: Tensor, inplace: bool = False) -> Tensor:
    return ops.relu(x)


def silu(x: Tensor, inplace: bool = False) -> Tensor:
    return ops.swish(x)


# -- losses ------------------------------------------------------------------------------------
def _reduce(ctx: Any, per_item: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return ctx.mark_loss(ops.mean(per_item))
    if reduction == "sum":
        return ctx.mark_loss(ops.sum(per_item))
    if reduction == "none":
        return ctx.mark_loss(per_item)
    raise Unsupported(f"reduction={reduction!r}")


def _labels(t: Tensor) -> Tensor:
    return t if t.dtype == dtypes.int32 else ops.cast(t, dtypes.int32)


def nll_loss(ctx: Any, x: Tensor, target: Tensor, weight: Any = None, size_average: Any = None,
             ignore_index: int = -100, reduce: Any = None, reduction: str = "mean") -> Tensor:
    if weight is not None or size_average is not None or reduce is not None:
        raise Unsupported("weight, size_average or reduce")
    if x.rank != 2:
        raise Unsupported(f"input of rank {x.rank} (only (N, C) is converted)")
    if reduction not in ("mean", "sum", "none"):
        raise Unsupported(f"reduction={reduction!r}")
    loss = ops.nll_loss(x, _labels(target), ignore_index=ignore_index, reduction=reduction,
                        log_prob=True)
    return ctx.mark_loss(loss)


def cross_entropy(ctx: Any, x: Tensor, target: Tensor, weight: Any = None,
                  size_average: Any = None, ignore_index: int = -100, reduce: Any = None,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    if label_smoothing:
        raise Unsupported("label_smoothing")
    return nll_loss(ctx, ops.log_softmax(x, 1), target, weight, size_average, ignore_index,
                    reduce, reduction)


def mse_loss(ctx: Any, x: Tensor, target: Tensor, size_average: Any = None, reduce: Any = None,
             reduction: str = "mean", weight: Any = None) -> Tensor:
    diff = x - target
    return _reduce(ctx, diff * diff, reduction)


def l1_loss(ctx: Any, x: Tensor, target: Tensor, size_average: Any = None, reduce: Any = None,
            reduction: str = "mean", weight: Any = None) -> Tensor:
    return _reduce(ctx, ops.abs(x - target), reduction)


def binary_cross_entropy_with_logits(ctx: Any, x: Tensor, target: Tensor, weight: Any = None,
                                     size_average: Any = None, reduce: Any = None,
                                     reduction: str = "mean", pos_weight: Any = None) -> Tensor:
    if pos_weight is not None:
        raise Unsupported("pos_weight")
    # max(x, 0) - x * t + log(1 + exp(-|x|)), stable for large |x|
    per_item = ops.relu(x) - x * target + ops.log(ops.exp(-ops.abs(x)) + 1.0)
    if weight is not None:
        per_item = per_item * weight
    return _reduce(ctx, per_item, reduction)


def identity_loss(ctx: Any, x: Tensor, reduction: str) -> Tensor:
    """``poptorch.identity_loss``: mark ``x`` (reduced by sum, mean or not at all) as the loss."""
    return _reduce(ctx, x, reduction)


# -- shapes ------------------------------------------------------------------------------------
def view(x: Tensor, *shape: Any) -> Tensor:
    return ops.reshape(x, _shape_args(shape))


def flatten(x: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    s, e = _dim(start_dim, x.rank), _dim(end_dim, x.rank)
    middle = math.prod(x.shape[s:e + 1])
    return ops.reshape(x, x.shape[:s] + (middle,) + x.shape[e + 1:])


def permute(x: Tensor, *dims: Any) -> Tensor:
    return ops.transpose(x, _dims(_shape_args(dims), x.rank))


def transpose(x: Tensor, dim0: int, dim1: int) -> Tensor:
    perm = list(range(x.rank))
    a, b = _dim(dim0, x.rank), _dim(dim1, x.rank)
    perm[a], perm[b] = perm[b], perm[a]
    return ops.transpose(x, perm)


def matrix_t(x: Tensor) -> Tensor:
    return x if x.rank < 2 else ops.transpose(x)


def unsqueeze(x: Tensor, dim: int) -> Tensor:
    d = _dim(dim, x.rank + 1)
    return ops.reshape(x, x.shape[:d] + (1,) + x.shape[d:])


def squeeze(x: Tensor, dim: Any = None) -> Tensor:
    if dim is not None:
        dims = [d for d in _dims(dim, x.rank) if x.shape[d] == 1]
        return ops.squeeze(x, dims) if dims else x
    return ops.squeeze(x)


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    return ops.concat(list(tensors), _dim(dim, tensors[0].rank))


def size(x: Tensor, dim: int | None = None) -> Any:
    return tuple(x.shape) if dim is None else x.shape[dim]


# -- reductions and arithmetic -----------------------------------------------------------------
def _reduction(op: Any) -> Any:
    def reduce(x: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
        return op(x, _dims(dim, x.rank), keepdims=keepdim)
    return reduce


mean = _reduction(ops.mean)
sum_ = _reduction(ops.sum)


MaxResult = namedtuple("MaxResult", ["values", "indices"])  # torch.return_types.max's fields


def max_(x: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    """``torch.max``: the overall max, ``(values, indices)`` along ``dim``, or elementwise."""
    if isinstance(dim, Tensor):
        return ops.maximum(x, dim)
    if dim is None:
        return ops.max(x)
    d = _dim(dim, x.rank)
    return MaxResult(ops.max(x, d, keepdims=keepdim), ops.argmax(x, d, keepdim))


def argmax(x: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    if dim is None:
        return ops.argmax(ops.reshape(x, (x.nelms,)), 0)
    return ops.argmax(x, _dim(dim, x.rank), keepdim)


def add(x: Any, y: Any, *, alpha: float = 1) -> Any:
    return x + y * alpha if alpha != 1 else x + y


def sub(x: Any, y: Any, *, alpha: float = 1) -> Any:
    return x - y * alpha if alpha != 1 else x - y


def to_dtype(x: Tensor, dtype: Any) -> Tensor:
    target = xlgraph_dtype(dtype)
    return x if x.dtype == target else ops.cast(x, target)


def to(x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    """``Tensor.to``: a dtype argument casts; devices are ignored (everything is on the IPU)."""
    torch_dtype = kwargs.get("dtype") or next((a for a in args if _is_torch_dtype(a)), None)
    return x if torch_dtype is None else to_dtype(x, torch_dtype)


def _is_torch_dtype(value: Any) -> bool:
    return type(value).__name__ == "dtype" and type(value).__module__ == "torch"


def xlgraph_dtype(torch_dtype: Any) -> dtypes.dtype:
    """The xlgraph dtype a torch dtype runs as (64-bit types run as 32-bit, as in PopTorch)."""
    name = str(torch_dtype).removeprefix("torch.")
    name = {"float64": "float32", "double": "float32", "int64": "int32", "long": "int32",
            "float": "float32", "half": "float16", "int": "int32"}.get(name, name)
    return getattr(dtypes, name)
