"""``popxl_addons.ops.cross_entropy_sharded_loss``: a sub-package as in popxl-addons: its
functions live in its module of the same name, re-exported here."""

from .cross_entropy_sharded_loss import (
    cross_entropy_sharded_loss,
)

__all__ = ["cross_entropy_sharded_loss"]
