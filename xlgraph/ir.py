"""PopXL's ``popxl.ir`` path: ``Ir``; the code lives in ``xlgraph.core.ir``."""

from xlgraph.core.ir import *  # noqa: F403
from xlgraph.core.ir import __all__  # noqa: F401
