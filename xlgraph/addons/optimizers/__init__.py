"""popxl-addons optimisers: ``AdamOptimizerStep``."""

from xlgraph.addons.optimizers.adam import *  # noqa: F403
from xlgraph.addons.optimizers.adam import __all__
