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
    layer_norm_distributed,
    replicated_all_reduce_TP,
    replicated_strided_collectives,
    rotary_pos_embed,
    streams,
)
from xlgraph.addons.ops.cross_entropy import cross_entropy, cross_entropy_with_grad
from xlgraph.addons.ops.streams import host_load, host_store

__all__ = ["cross_entropy", "cross_entropy_with_grad", "host_load", "host_store", "streams",
           "cross_entropy_sharded_loss", "cross_entropy_sharded_wr_loss",
           "layer_norm_distributed", "replicated_all_reduce_TP", "replicated_strided_collectives",
           "rotary_pos_embed"]

del _cross_entropy_module
