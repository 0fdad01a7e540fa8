"""``popxl_addons.ops.linear_layout``: a copy laid out linearly over tiles, a layout hint (the
record is in ``xlgraph.ops.placement``)."""

from xlgraph.ops.placement import linear_layout

__all__ = ["linear_layout"]
