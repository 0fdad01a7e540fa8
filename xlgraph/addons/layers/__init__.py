"""popxl-addons layers: ``Linear``, ``LayerNorm``, ``GroupNorm``, ``Embedding``, ``Conv2D``;
the custom-op layers live in their modules (``layers.layer_norm_distributed``,
``layers.linear_fp8``, ``layers.linear_gq``)."""

from xlgraph.addons.layers import layer_norm_distributed, linear_fp8, linear_gq  # noqa: F401
from xlgraph.addons.layers.conv import Conv2D
from xlgraph.addons.layers.embedding import Embedding
from xlgraph.addons.layers.layer_norm import GroupNorm, LayerNorm
from xlgraph.addons.layers.linear import Linear

__all__ = ["Conv2D", "Embedding", "LayerNorm", "GroupNorm", "Linear"]
