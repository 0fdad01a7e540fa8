"""PopXL's ``popxl.context`` path: the graph context stack (code in ``xlgraph.core.context``)."""

from xlgraph.core.context import *  # noqa: F403
from xlgraph.core.context import __all__  # noqa: F401
