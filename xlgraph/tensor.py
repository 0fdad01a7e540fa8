"""PopXL's ``popxl.tensor`` path: tensors, specs, factories (code in ``xlgraph.core.tensor``)."""

from xlgraph.core.tensor import *  # noqa: F403
from xlgraph.core.tensor import __all__  # noqa: F401
