"""popxl-addons optimisers: ``AdamOptimizerStep``."""

from xlgraph.addons.optimizers.adam import AdamOptimizerStep

__all__ = ["AdamOptimizerStep"]
