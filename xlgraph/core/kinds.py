"""What the lower core modules know of the records above them: type hints only.

The data model refers to itself: a tensor knows its graph and producer op, a graph its Ir and
ops. The modules import one way (``context`` <- ``tensor`` <- ``graph`` <- ``op`` <- ``ir`` <-
``listing``); where a lower module names a record defined above it (``Tensor.graph``,
``Graph.ir``, the graph context stack, the PopART views), it uses one of these protocols, which
list the members it reads. ``Ir``, ``Graph``, ``Op`` and ``Tensor`` satisfy them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

__all__ = ["IrLike", "GraphLike", "OpLike", "TensorLike"]


class TensorLike(Protocol):
    """A ``xlgraph.core.tensor.Tensor``."""

    name: str
    graph: GraphLike
    producer: OpLike | None

    @property
    def id(self) -> str: ...

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def meta_shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> Any: ...

    @property
    def nelms(self) -> int: ...


class OpLike(Protocol):
    """A ``xlgraph.core.op.Op``: one node of a graph."""

    name: str
    index: int
    id: int
    graph: GraphLike
    inputs: Sequence[Any]
    outputs: Sequence[Any]
    hints: dict[str, Any]

    @property
    def defn(self) -> Any: ...

    @property
    def called_graphs(self) -> Sequence[GraphLike]: ...


class GraphLike(Protocol):
    """A ``xlgraph.core.graph.Graph``."""

    name: str
    ir: IrLike
    is_main: bool
    ops: list[Any]

    @property
    def id(self) -> str: ...

    @property
    def inputs(self) -> tuple[Any, ...]: ...

    @property
    def outputs(self) -> tuple[Any, ...]: ...

    @property
    def tensors(self) -> tuple[Any, ...]: ...

    @property
    def called_graphs(self) -> tuple[GraphLike, ...]: ...

    add_variable: Callable[..., Any]
    add_constant: Callable[..., Any]
    add_input: Callable[..., Any]
    add_output: Callable[..., Any]


class IrLike(Protocol):
    """A ``xlgraph.core.ir.Ir``."""

    @property
    def main_graph(self) -> GraphLike: ...

    @property
    def graphs(self) -> list[GraphLike]: ...

    @property
    def frozen(self) -> bool: ...

    @property
    def replication_factor(self) -> int: ...

    create_graph: Callable[..., Any]
    replica_grouping: Callable[..., Any]
