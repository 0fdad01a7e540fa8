"""All op builders, with PopXL's names. ``REGISTRY`` maps op names to their ``OpDef`` records."""

from xlgraph.op import BUILDERS, REGISTRY, OpDef
from xlgraph.ops import collectives, var_updates
from xlgraph.ops.call import CallSiteInfo, call, call_with_info, repeat, repeat_with_info
from xlgraph.ops.elementwise import (
    abs,
    add,
    add_,
    cast,
    div,
    equal,
    exp,
    exp_,
    gelu,
    gelu_,
    geluerf,
    geluerf_,
    greater,
    log,
    mul,
    negate,
    pow,
    relu,
    relu_,
    scaled_add,
    scaled_add_,
    sign,
    sqrt,
    sub,
    tanh,
    where,
)
from xlgraph.ops.host import host_load, host_store
from xlgraph.ops.linalg import matmul
from xlgraph.ops.movement import (
    concat,
    concat_,
    detach,
    detach_,
    expand,
    flatten,
    flatten_,
    identity,
    init,
    rename,
    reshape,
    reshape_,
    slice,
    slice_,
    squeeze,
    transpose,
    transpose_,
)
from xlgraph.ops.nn import nll_loss, nll_loss_with_softmax_grad, onehot, softmax
from xlgraph.ops.reduce import argmax, argmin, max, mean, min, sum

__all__ = [
    "BUILDERS", "REGISTRY", "OpDef", "CallSiteInfo", "collectives", "var_updates",
    "abs", "add", "add_", "argmax", "argmin", "call", "call_with_info", "cast", "concat",
    "concat_", "detach", "detach_", "div", "equal", "exp", "exp_", "expand", "flatten",
    "flatten_", "gelu", "gelu_", "geluerf", "geluerf_", "greater", "host_load", "host_store",
    "identity", "init", "log", "matmul", "max", "mean", "min", "mul", "negate", "nll_loss",
    "nll_loss_with_softmax_grad", "onehot", "pow", "relu", "relu_", "rename", "repeat",
    "repeat_with_info", "reshape", "reshape_", "scaled_add", "scaled_add_", "sign", "slice",
    "slice_", "softmax", "sqrt", "squeeze", "sub", "sum", "tanh", "transpose", "transpose_",
    "where",
]
