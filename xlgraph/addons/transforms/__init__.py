"""popxl-addons graph transforms."""

from xlgraph.addons.transforms.autodiff import *  # noqa: F403
from xlgraph.addons.transforms.autodiff import __all__ as _autodiff

__all__ = [*_autodiff]
