"""The conversion table: every torch target the frontend converts, and its xlgraph builder.

Keys are ``torch.nn`` module classes (leaf modules of the trace), functions (``torch.*``,
``torch.nn.functional.*``, ``operator.*``) and tensor method names (``"view"``). Every entry is
``builder(ctx, *args, **kwargs)``; module entries get the module as their first argument.
Adding a torch op means adding one line here (and a function in ``functional`` when needed).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - torch's conventional name
from torch import nn

from xlgraph import ops
from xlgraph.poptorch import functional as fn
from xlgraph.poptorch.api_ops import CONVERSIONS as POPTORCH_OPS
from xlgraph.poptorch.identity import identity_loss

Builder = Callable[..., Any]


def _plain(f: Callable[..., Any]) -> Builder:
    """A builder for a function that needs no context."""
    return lambda ctx, *args, **kwargs: f(*args, **kwargs)


def _one(op: Callable[[Any], Any]) -> Builder:
    """A builder for a function of one tensor (torch-only keywords such as ``out`` refused)."""
    return lambda ctx, x: op(x)


def _batch_norm(ctx: Any, m: Any, x: Any) -> Any:
    training = m.training or m.running_mean is None
    stats = (m.running_mean, m.running_var) if m.track_running_stats else None
    if m.momentum is None:
        raise fn.Unsupported("momentum=None (a cumulative moving average)")
    y = fn.batch_norm(ctx, x, ctx.tensor(m.running_mean), ctx.tensor(m.running_var),
                      ctx.tensor(m.weight), ctx.tensor(m.bias), training, m.momentum, m.eps,
                      stats=stats if training else None)
    if training and stats is not None:
        ctx.update_buffer(m.num_batches_tracked, ctx.tensor(m.num_batches_tracked) + 1)
    return y


MODULES: dict[type, Builder] = {
    nn.Linear: lambda ctx, m, x: fn.linear(x, ctx.tensor(m.weight), ctx.tensor(m.bias)),
    nn.Conv2d: lambda ctx, m, x: fn.conv2d(x, ctx.tensor(m.weight), ctx.tensor(m.bias),
                                           m.stride, m.padding, m.dilation, m.groups),
    nn.MaxPool2d: lambda ctx, m, x: fn.max_pool2d(x, m.kernel_size, m.stride, m.padding,
                                                  m.dilation, m.ceil_mode, m.return_indices),
    nn.AvgPool2d: lambda ctx, m, x: fn.avg_pool2d(x, m.kernel_size, m.stride, m.padding,
                                                  m.ceil_mode, m.count_include_pad,
                                                  m.divisor_override),
    nn.AdaptiveAvgPool2d: lambda ctx, m, x: fn.adaptive_avg_pool2d(x, m.output_size),
    nn.BatchNorm1d: _batch_norm,
    nn.BatchNorm2d: _batch_norm,
    nn.GroupNorm: lambda ctx, m, x: fn.group_norm(x, m.num_groups, ctx.tensor(m.weight),
                                                  ctx.tensor(m.bias), m.eps),
    nn.LayerNorm: lambda ctx, m, x: fn.layer_norm(x, m.normalized_shape, ctx.tensor(m.weight),
                                                  ctx.tensor(m.bias), m.eps),
    nn.Dropout: lambda ctx, m, x: fn.dropout(ctx, x, m.p, m.training),
    nn.Embedding: lambda ctx, m, x: fn.embedding(x, ctx.tensor(m.weight), m.padding_idx,
                                                 m.max_norm, m.norm_type, m.scale_grad_by_freq),
    nn.Flatten: lambda ctx, m, x: fn.flatten(x, m.start_dim, m.end_dim),
    nn.Identity: lambda ctx, m, x: x,
    nn.ReLU: lambda ctx, m, x: ops.relu(x),
    nn.GELU: lambda ctx, m, x: fn.gelu(x, m.approximate),
    nn.SiLU: lambda ctx, m, x: ops.swish(x),
    nn.Sigmoid: lambda ctx, m, x: ops.sigmoid(x),
    nn.Tanh: lambda ctx, m, x: ops.tanh(x),
    nn.Softmax: lambda ctx, m, x: fn.softmax(x, m.dim),
    nn.LogSoftmax: lambda ctx, m, x: fn.log_softmax(x, m.dim),
    nn.CrossEntropyLoss: lambda ctx, m, x, t: fn.cross_entropy(
        ctx, x, t, ctx.tensor(m.weight), None, m.ignore_index, None, m.reduction,
        m.label_smoothing),
    nn.NLLLoss: lambda ctx, m, x, t: fn.nll_loss(ctx, x, t, ctx.tensor(m.weight), None,
                                                 m.ignore_index, None, m.reduction),
    nn.MSELoss: lambda ctx, m, x, t: fn.mse_loss(ctx, x, t, reduction=m.reduction),
    nn.L1Loss: lambda ctx, m, x, t: fn.l1_loss(ctx, x, t, reduction=m.reduction),
    nn.BCEWithLogitsLoss: lambda ctx, m, x, t: fn.binary_cross_entropy_with_logits(
        ctx, x, t, ctx.tensor(m.weight), reduction=m.reduction,
        pos_weight=ctx.tensor(m.pos_weight)),
}

_ARITHMETIC: dict[Any, Builder] = {
    op: _plain(op) for op in (operator.add, operator.sub, operator.mul, operator.truediv,
                              operator.pow, operator.matmul, operator.neg, operator.getitem,
                              operator.floordiv, operator.iadd, operator.imul)
}

FUNCTIONS: dict[Any, Builder] = {
    **_ARITHMETIC,
    getattr: _plain(getattr),
    F.linear: _plain(fn.linear),
    F.conv2d: _plain(fn.conv2d),
    F.max_pool2d: _plain(fn.max_pool2d),
    torch.max_pool2d: _plain(fn.max_pool2d),
    F.avg_pool2d: _plain(fn.avg_pool2d),
    F.adaptive_avg_pool2d: _plain(fn.adaptive_avg_pool2d),
    F.batch_norm: lambda ctx, x, rm, rv, w=None, b=None, training=False, momentum=0.1,
    eps=1e-5: fn.batch_norm(ctx, x, rm, rv, w, b, training, momentum, eps),
    F.group_norm: _plain(fn.group_norm),
    F.layer_norm: _plain(fn.layer_norm),
    F.dropout: fn.dropout,
    F.embedding: _plain(fn.embedding),
    F.relu: _plain(fn.relu),
    torch.relu: _one(ops.relu),
    F.gelu: _plain(fn.gelu),
    F.silu: _plain(fn.silu),
    torch.sigmoid: _one(ops.sigmoid),
    F.sigmoid: _one(ops.sigmoid),
    torch.tanh: _one(ops.tanh),
    F.tanh: _one(ops.tanh),
    torch.exp: _one(ops.exp),
    torch.log: _one(ops.log),
    torch.sqrt: _one(ops.sqrt),
    torch.abs: _one(ops.abs),
    F.softmax: _plain(fn.softmax),
    torch.softmax: _plain(fn.softmax),
    F.log_softmax: _plain(fn.log_softmax),
    torch.log_softmax: _plain(fn.log_softmax),
    F.cross_entropy: fn.cross_entropy,
    F.nll_loss: fn.nll_loss,
    F.mse_loss: fn.mse_loss,
    F.l1_loss: fn.l1_loss,
    F.binary_cross_entropy_with_logits: fn.binary_cross_entropy_with_logits,
    torch.flatten: _plain(fn.flatten),
    torch.reshape: _plain(fn.view),
    torch.permute: _plain(fn.permute),
    torch.transpose: _plain(fn.transpose),
    torch.t: _plain(fn.matrix_t),
    torch.unsqueeze: _plain(fn.unsqueeze),
    torch.squeeze: _plain(fn.squeeze),
    torch.cat: _plain(fn.cat),
    torch.concat: _plain(fn.cat),
    torch.mean: _plain(fn.mean),
    torch.sum: _plain(fn.sum_),
    torch.max: _plain(fn.max_),
    torch.argmax: _plain(fn.argmax),
    torch.matmul: _plain(operator.matmul),
    torch.add: _plain(fn.add),
    torch.sub: _plain(fn.sub),
    torch.mul: _plain(operator.mul),
    torch.div: _plain(operator.truediv),
    identity_loss: fn.identity_loss,
    **POPTORCH_OPS,  # poptorch.nop, dynamic_slice, ipu_print_tensor... (custom ops)
}

METHODS: dict[str, Builder] = {
    "view": _plain(fn.view),
    "reshape": _plain(fn.view),
    "flatten": _plain(fn.flatten),
    "permute": _plain(fn.permute),
    "transpose": _plain(fn.transpose),
    "t": _plain(fn.matrix_t),
    "unsqueeze": _plain(fn.unsqueeze),
    "squeeze": _plain(fn.squeeze),
    "size": _plain(fn.size),
    "dim": lambda ctx, x: x.rank,
    "mean": _plain(fn.mean),
    "sum": _plain(fn.sum_),
    "max": _plain(fn.max_),
    "argmax": _plain(fn.argmax),
    "relu": _one(ops.relu),
    "sigmoid": _one(ops.sigmoid),
    "tanh": _one(ops.tanh),
    "exp": _one(ops.exp),
    "log": _one(ops.log),
    "sqrt": _one(ops.sqrt),
    "abs": _one(ops.abs),
    "softmax": _plain(fn.softmax),
    "log_softmax": _plain(fn.log_softmax),
    "matmul": _plain(operator.matmul),
    "add": _plain(fn.add),
    "sub": _plain(fn.sub),
    "mul": _plain(operator.mul),
    "div": _plain(operator.truediv),
    "pow": _plain(operator.pow),
    "neg": _one(operator.neg),
    "contiguous": lambda ctx, x, *a, **k: x,
    "clone": lambda ctx, x, *a, **k: x,
    "detach": _one(ops.detach),
    "float": lambda ctx, x: fn.to_dtype(x, torch.float32),
    "long": lambda ctx, x: fn.to_dtype(x, torch.int64),
    "int": lambda ctx, x: fn.to_dtype(x, torch.int32),
    "to": _plain(fn.to),
}


def label(target: Any) -> str:
    """A readable name of a torch function (``torch.relu``, ``F.linear``, ``operator.add``)."""
    module = (getattr(target, "__module__", None) or "torch").replace("torch.nn.functional", "F")
    module = {"_operator": "operator", "builtins": "builtins"}.get(module, module)
    return f"{module}.{getattr(target, '__name__', target)}"


def module_class(module: Any) -> type:
    """The user's class of ``module`` (a training model swaps it for a syncing subclass)."""
    return getattr(type(module), "_xlgraph_original", type(module))


def supported() -> list[str]:
    """The names of everything in the table, for error messages."""
    names = [f"nn.{m.__name__}" for m in MODULES]
    names += sorted({label(f) for f in FUNCTIONS})
    names += [f"Tensor.{m}" for m in sorted(METHODS)]
    return names
