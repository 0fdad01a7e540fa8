"""Graph and Ir listings and Graphviz DOT; the code lives in ``xlgraph.core.listing``."""

from xlgraph.core import listing as _core
from xlgraph.core.listing import *  # noqa: F403
from xlgraph.core.listing import attr_text, callee_sites, op_text

__all__ = [*_core.__all__, "attr_text", "callee_sites", "op_text"]
