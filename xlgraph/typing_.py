"""Type annotations with a meaning to ``Ir.create_graph``: ``TensorByRef``.

PopXL's path; ``TensorByRef`` lives in ``xlgraph.core.by_ref``, beside the ``Ir`` that reads it.
"""

from __future__ import annotations

import typing
from typing import Any

from xlgraph.core.by_ref import TensorByRef, is_by_ref_annotation

__all__ = ["TensorByRef", "NewAliasAnnotation", "is_by_ref_annotation"]


def NewAliasAnnotation(name: str, tp: type) -> Any:  # noqa: N802 - PopXL's public name
    """A new annotation type ``name`` that stands for ``tp`` (``TensorByRef`` is one for
    ``Tensor``); only ``TensorByRef`` changes how ``create_graph`` builds inputs."""
    return typing.NewType(name, tp)
