"""``TensorByRef``: the annotation that makes a ``create_graph`` parameter pass-by-reference.

It is a ``Tensor`` subclass, so it lives in the core beside ``Ir.create_graph``, which reads
it; PopXL's path ``xlgraph.typing_`` re-exports it.
"""

from __future__ import annotations

import typing
from typing import Any

from xlgraph.core.tensor import Tensor

__all__ = ["TensorByRef", "is_by_ref_annotation"]


class TensorByRef(Tensor):
    """Annotate a ``create_graph`` parameter with ``TensorByRef`` (or ``List[TensorByRef]``)
    to make its graph input pass-by-reference: in-place changes the graph makes to it are seen
    by the caller at every call site (as ``graph_input(..., by_ref=True)``).

    Example:
        >>> def increment(x: TensorByRef):
        ...     ops.add_(x, 1.0)
    """

    __module__ = "xlgraph.typing_"  # PopXL's path (``popxl.typing_.TensorByRef``)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("TensorByRef is an annotation for create_graph parameters, not a tensor")


def is_by_ref_annotation(annotation: Any) -> bool:
    """True when ``annotation`` is ``TensorByRef`` or a container of it (strings too, as
    written under ``from __future__ import annotations``)."""
    if isinstance(annotation, str):
        return "TensorByRef" in annotation
    if annotation is TensorByRef:
        return True
    return any(is_by_ref_annotation(a) for a in typing.get_args(annotation))
