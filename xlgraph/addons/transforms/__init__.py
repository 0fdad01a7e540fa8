"""popxl-addons graph transforms."""

from xlgraph.addons.transforms.autodiff import autodiff, autodiff_with_accumulation

__all__ = ["autodiff", "autodiff_with_accumulation"]
