"""``popxl_addons.ops.fp8_mse_scale``: a sub-package as in popxl-addons: its
functions live in its module of the same name, re-exported here."""

from .fp8_mse_scale import (
    fp8_mse_scale,
)

__all__ = ["fp8_mse_scale"]
