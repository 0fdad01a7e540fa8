"""popxl-addons layers: ``Linear``, ``LayerNorm``, ``Embedding``, ``Conv2D``."""

from xlgraph.addons.layers.conv import *  # noqa: F403
from xlgraph.addons.layers.embedding import *  # noqa: F403
from xlgraph.addons.layers.layer_norm import *  # noqa: F403
from xlgraph.addons.layers.linear import *  # noqa: F403
from xlgraph.addons.layers.conv import __all__ as _conv
from xlgraph.addons.layers.embedding import __all__ as _embedding
from xlgraph.addons.layers.layer_norm import __all__ as _layer_norm
from xlgraph.addons.layers.linear import __all__ as _linear

__all__ = [*_conv, *_embedding, *_layer_norm, *_linear]
