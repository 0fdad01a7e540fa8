"""``popxl_addons.ops.layer_norm_distributed``: a sub-package as in popxl-addons: its
functions live in its module of the same name, re-exported here."""

from .layer_norm_distributed import (
    layer_norm_distributed,
)

__all__ = ["layer_norm_distributed"]
