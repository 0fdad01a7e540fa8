"""Op records, the registry and the builders' helpers; the code lives in ``xlgraph.core.op``."""

from xlgraph.core import op as _core
from xlgraph.core.op import *  # noqa: F403
from xlgraph.core.op import (
    apply,
    apply1,
    as_tensor,
    broadcast_shapes,
    check_same_graph,
    normalize_axes,
    same_dtype,
    same_spec,
)

__all__ = [*_core.__all__, "apply", "apply1", "as_tensor", "broadcast_shapes", "check_same_graph",
           "normalize_axes", "same_dtype", "same_spec"]
