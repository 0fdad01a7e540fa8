"""PopXL's ``popxl.graph`` path: ``Graph``; the code lives in ``xlgraph.core.graph``."""

from xlgraph.core.graph import *  # noqa: F403
from xlgraph.core.graph import __all__  # noqa: F401
