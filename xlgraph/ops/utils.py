"""PopXL's ``popxl.ops.utils`` checks, for functions that users write to build ops."""

from __future__ import annotations

from collections.abc import Iterable

from xlgraph.core.graph import Graph
from xlgraph.core.tensor import Tensor
from xlgraph.errors import user_source_line

__all__ = ["check_in_graph", "check_tensor_ipu_and_tile_set", "handle_negative_axis"]


def _each(value: Tensor | Iterable[Tensor]) -> Iterable[Tensor]:
    return (value,) if isinstance(value, Tensor) else value


def check_in_graph(graph: Graph, **tensors: Tensor | Iterable[Tensor]) -> None:
    """Raise ``ValueError`` unless every tensor (keyword: a tensor or an iterable of them)
    belongs to ``graph``; the message names the keyword, the tensor and both graphs."""
    for name, value in tensors.items():
        for t in _each(value):
            if not isinstance(t, Tensor):
                raise TypeError(f"check_in_graph: {name} must be a Tensor, got {type(t).__name__}")
            if t.graph is not graph:
                raise ValueError(
                    f"The input tensor `{name}` ({t.id}) is in graph {t.graph.name!r}, not in "
                    f"the current graph {graph.name!r} [at {user_source_line()}]")


def check_tensor_ipu_and_tile_set(**tensors: Tensor | Iterable[Tensor]) -> None:
    """Raise ``ValueError`` unless every tensor is on one IPU and one tile set."""
    seen: tuple[str, Tensor] | None = None
    for name, value in tensors.items():
        for t in _each(value):
            if seen is None:
                seen = (name, t)
                continue
            first = seen[1]
            if (t.ipu, t.tile_set) != (first.ipu, first.tile_set):
                raise ValueError(
                    f"`{seen[0]}` is on IPU {first.ipu} tile set {first.tile_set!r} but `{name}` "
                    f"is on IPU {t.ipu} tile set {t.tile_set!r} [at {user_source_line()}]")


def handle_negative_axis(t: Tensor, axis: int) -> int:
    """``axis`` counted from the front of ``t``'s shape (``-1`` is the last axis)."""
    return len(t.shape) + axis if axis < 0 else axis
