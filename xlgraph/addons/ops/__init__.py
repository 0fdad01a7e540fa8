"""popxl-addons ops: ``cross_entropy``, ``cross_entropy_with_grad``, the stream helpers and the
library's custom ops, one sub-module each at its popxl-addons path (``from
popxl_addons.ops.rotary_pos_embed import rotary_pos_embed``). The custom ops are ordinary
xlgraph ops (records in ``xlgraph.ops``), cheap to import.
"""

from __future__ import annotations

from xlgraph.addons.ops import cross_entropy as _cross_entropy_module
from xlgraph.addons.ops import (
    cross_entropy_sharded_loss,
    cross_entropy_sharded_wr_loss,
    fp8_mse_scale,
    fp8_utils,
    grad_reduce_square_add,
    group_quantize_decompress,
    layer_norm_distributed,
    linear_layout,
    replicated_all_reduce_TP,
    replicated_strided_collectives,
    rotary_pos_embed,
    static_sparse_ops,
    streams,
)
from xlgraph.addons.ops.cross_entropy import cross_entropy, cross_entropy_with_grad
from xlgraph.addons.ops.fp8_amax_scale import fp8_amax_scale  # the function shadows the module
from xlgraph.addons.ops.streams import host_load, host_store

__all__ = ["cross_entropy", "cross_entropy_with_grad", "host_load", "host_store", "streams",
           "fp8_amax_scale", "cross_entropy_sharded_loss", "cross_entropy_sharded_wr_loss",
           "fp8_mse_scale", "fp8_utils", "grad_reduce_square_add", "group_quantize_decompress",
           "layer_norm_distributed", "linear_layout", "replicated_all_reduce_TP",
           "replicated_strided_collectives", "rotary_pos_embed", "static_sparse_ops"]

del _cross_entropy_module
