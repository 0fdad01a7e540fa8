"""All op builders, with PopXL's names. ``REGISTRY`` maps op names to their ``OpDef`` records."""

from xlgraph.op import BUILDERS, REGISTRY, OpDef
from xlgraph.ops import (
    collectives,
    fp8_scale,  # noqa: F401 - popxl-addons' custom ops (xlgraph.addons.ops re-exports)
    norm_distributed,  # noqa: F401
    quantize,  # noqa: F401
    rotary,  # noqa: F401
    sharded_loss,  # noqa: F401
    sparse,  # noqa: F401
    tensor_methods,  # noqa: F401 - lends Tensor its operators
    tp_collectives,  # noqa: F401
    var_updates,
)
from xlgraph.ops.activations import log_softmax, logsumexp, sigmoid, swish, swish_
from xlgraph.ops.call import CallSiteInfo, call, call_with_info, repeat, repeat_with_info
from xlgraph.ops.control import ConditionalSiteInfo, conditional, conditional_with_info
from xlgraph.ops.conv import PadType, conv, conv_transpose
from xlgraph.ops.ctc import ctc_loss
from xlgraph.ops.ctc_decode import ctc_beam_search_decoder
from xlgraph.ops.debug import print_tensor
from xlgraph.ops.dynamic import dynamic_slice, dynamic_update, dynamic_update_
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
from xlgraph.ops.fp8 import (
    conv_pow2scaled,
    conv_transpose_pow2scaled,
    matmul_pow2scaled,
    pow2scale_cast_from_fp8,
    pow2scale_cast_to_fp8,
)
from xlgraph.ops.host import host_load, host_store
from xlgraph.ops.indexing import gather, scatter, subsample, tied_gather, topk
from xlgraph.ops.linalg import matmul
from xlgraph.ops.math import (
    ceil,
    clamp,
    clip,
    cos,
    cumsum,
    floor,
    fmod,
    increment_mod,
    increment_mod_,
    isfinite,
    isinf,
    isnan,
    l1,
    l2,
    log2,
    logical_and,
    logical_not,
    logical_or,
    logsum,
    maximum,
    median,
    prod,
    sin,
    sumsquare,
)
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
from xlgraph.ops.norm import batch_norm_inference, group_norm, layer_norm
from xlgraph.ops.optim_updates import lamb_square
from xlgraph.ops.placement import io_tile_copy, ipu_copy, remote_code_load
from xlgraph.ops.pointwise import (
    acos,
    acosh,
    asin,
    asinh,
    atan,
    atan2,
    atanh,
    bitwise_and,
    bitwise_not,
    bitwise_or,
    bitwise_xor,
    cosh,
    erf,
    expm1,
    floor_divide,
    greater_equal,
    less,
    less_equal,
    log1p,
    log10,
    logical_xor,
    maximum2,
    minimum,
    not_equal,
    reciprocal,
    remainder,
    round,
    rsqrt,
    sinh,
    tan,
    trunc,
)
from xlgraph.ops.pool import average_pool, max_pool
from xlgraph.ops.random import (
    dropout,
    random_normal,
    random_uniform,
    shaped_dropout,
    split_random_seed,
)
from xlgraph.ops.reduce import argmax, argmin, max, mean, min, sum
from xlgraph.ops.remote import remote_load, remote_load_, remote_store
from xlgraph.ops.resize import interpolate
from xlgraph.ops.roi import roi_align
from xlgraph.ops.scatter_reduce import groupedgather, histogram, scatter_reduce
from xlgraph.ops.split import split

__all__ = [
    "BUILDERS", "REGISTRY", "OpDef", "CallSiteInfo", "PadType", "collectives", "var_updates",
    "abs", "add", "add_", "argmax", "argmin", "call", "call_with_info", "cast", "concat",
    "concat_", "detach", "detach_", "div", "equal", "exp", "exp_", "expand", "flatten",
    "flatten_", "gelu", "gelu_", "geluerf", "geluerf_", "greater", "host_load", "host_store",
    "identity", "init", "log", "matmul", "max", "mean", "min", "mul", "negate", "nll_loss",
    "nll_loss_with_softmax_grad", "onehot", "pow", "relu", "relu_", "rename", "repeat",
    "repeat_with_info", "reshape", "reshape_", "scaled_add", "scaled_add_", "sign", "slice",
    "slice_", "softmax", "sqrt", "squeeze", "sub", "sum", "tanh", "transpose", "transpose_",
    "where",
]

# -- op library part 2: math, indexing, control flow, printing, optimiser updates ----------------
__all__ += [
    "ConditionalSiteInfo", "ceil", "clamp", "clip", "conditional", "conditional_with_info", "cos",
    "cumsum", "dynamic_slice", "dynamic_update", "dynamic_update_", "floor", "fmod", "gather",
    "increment_mod", "increment_mod_", "interpolate", "isfinite", "isinf", "isnan", "l1", "l2",
    "log2", "logical_and", "logical_not", "logical_or", "logsum", "maximum", "median", "prod",
    "scatter", "sin", "split", "subsample", "sumsquare", "topk", "print_tensor", "lamb_square",
    "tied_gather",
]

# -- op library part 1: convolution, pooling, normalisation, randomness, activations ----------
__all__ += [
    "average_pool", "batch_norm_inference", "conv", "conv_transpose", "dropout", "group_norm",
    "layer_norm", "log_softmax", "logsumexp", "max_pool", "random_normal", "random_uniform",
    "shaped_dropout", "sigmoid", "split_random_seed", "swish", "swish_",
]

# -- PopXL compatibility: placement -----------------------------------------------------------
__all__ += ["io_tile_copy", "ipu_copy", "remote_code_load"]

# -- fp8 ---------------------------------------------------------------------------------------
__all__ += ["conv_pow2scaled", "conv_transpose_pow2scaled", "matmul_pow2scaled",
            "pow2scale_cast_from_fp8",
            "pow2scale_cast_to_fp8"]

# -- PopXL's remaining ops ------------------------------------------------------------------------
__all__ += ["groupedgather", "histogram", "roi_align", "scatter_reduce"]

# -- remote memory ------------------------------------------------------------------------------
__all__ += ["remote_load", "remote_load_", "remote_store"]

# -- torch's remaining pointwise math (xlgraph extras for the PopTorch frontend) ----------------
__all__ += ["acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "bitwise_and",
            "bitwise_not", "bitwise_or", "bitwise_xor", "cosh", "erf", "expm1", "floor_divide",
            "greater_equal", "less", "less_equal", "log1p", "log10", "logical_xor", "maximum2",
            "minimum", "not_equal", "reciprocal", "remainder", "round", "rsqrt", "sinh", "tan",
            "trunc", "ctc_loss", "ctc_beam_search_decoder"]
