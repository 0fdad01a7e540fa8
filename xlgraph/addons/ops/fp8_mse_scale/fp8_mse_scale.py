"""``popxl_addons.ops.fp8_mse_scale``: the fp8 scale that minimises a histogram's squared error
(the record is ``xlgraph.ops.fp8_scale``; ``fp8_amax_scale`` is ``popxl_addons.ops``')."""

from xlgraph.ops.fp8_scale import fp8_mse_scale

__all__ = ["fp8_mse_scale"]
