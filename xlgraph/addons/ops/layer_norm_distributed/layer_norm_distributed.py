"""``popxl_addons.ops.layer_norm_distributed``: layer normalisation over a hidden dimension
split across replicas (the record is ``xlgraph.ops.norm_distributed``)."""

from xlgraph.ops.norm_distributed import layer_norm_distributed

__all__ = ["layer_norm_distributed"]
