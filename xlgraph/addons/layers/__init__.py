"""popxl-addons layers: ``Linear``, ``LayerNorm``, ``Embedding``, ``Conv2D``."""

from xlgraph.addons.layers.conv import Conv2D
from xlgraph.addons.layers.embedding import Embedding
from xlgraph.addons.layers.layer_norm import LayerNorm
from xlgraph.addons.layers.linear import Linear

__all__ = ["Conv2D", "Embedding", "LayerNorm", "Linear"]
