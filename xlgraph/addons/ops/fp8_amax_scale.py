"""``popxl_addons.ops.fp8_amax_scale`` as a module path (``from
popxl_addons.ops.fp8_amax_scale import fp8_amax_scale``); the package attribute of that name
is the function itself, as in popxl-addons."""

from __future__ import annotations

from xlgraph.ops.fp8_scale import fp8_amax_scale

__all__ = ["fp8_amax_scale"]
