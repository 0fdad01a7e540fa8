"""``popxl_addons.ops.linear_layout``: a sub-package as in popxl-addons: its
functions live in its module of the same name, re-exported here."""

from .linear_layout import (
    linear_layout,
)

__all__ = ["linear_layout"]
