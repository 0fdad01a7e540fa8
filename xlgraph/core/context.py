"""The graph context stack, ``in_sequence`` and ``name_scope``: the only global state (one set
of stacks per thread, so threads can build graphs of different Irs at the same time)."""

from __future__ import annotations

import contextlib
import functools
import itertools
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from xlgraph.errors import skip_in_source_lines, user_source_line

if TYPE_CHECKING:  # records above this module, by the members it reads (kinds.py)
    from xlgraph.core.kinds import GraphLike as Graph
    from xlgraph.core.kinds import IrLike as Ir

__all__ = [
    "get_current_graph",
    "get_main_graph",
    "get_ir",
    "gcg",
    "gmg",
    "gir",
    "in_sequence",
    "name_scope",
    "io_tiles",
    "ipu",
    "op_hints",
    "Context",
    "get_current_context",
    "op_debug_context",
]


_region_ids = itertools.count(1)  # shared by all threads, so region ids stay unique


class _Context(threading.local):
    """The stacks of one thread: each thread builds in its own current graph."""

    def __init__(self) -> None:
        self.graphs: list[Graph] = []
        self.sequence: list[Any] = []  # stack of (mode, region id)
        self.scopes: list[str] = []
        self.hints: list[dict[str, Any]] = []


_ctx = _Context()


def push_graph(graph: Graph) -> None:
    if _ctx.graphs and _ctx.graphs[-1].ir is not graph.ir:
        raise RuntimeError(
            f"cannot enter graph {graph.name!r} of {graph.ir!r} inside a graph of another Ir "
            f"({_ctx.graphs[-1].ir!r})"
        )
    _ctx.graphs.append(graph)


def pop_graph() -> None:
    _ctx.graphs.pop()


def get_current_graph() -> Graph:
    """The graph that ops are currently added to (the innermost ``with graph:``).

    Raises:
        RuntimeError: outside any graph context.
    """
    if not _ctx.graphs:
        raise RuntimeError(
            f"no current graph: build ops inside `with ir.main_graph:` or `with some_graph:` "
            f"[at {user_source_line()}]"
        )
    return _ctx.graphs[-1]


def get_main_graph() -> Graph:
    """The main graph of the current graph's Ir."""
    return get_current_graph().ir.main_graph


def get_ir() -> Ir:
    """The Ir of the current graph."""
    return get_current_graph().ir


gcg = get_current_graph
gmg = get_main_graph
gir = get_ir


@contextlib.contextmanager
def in_sequence(mode: bool | str = True) -> Iterator[None]:
    """Ops created inside run in creation order.

    Without it only data dependencies order ops, and two unordered in-place ops touching one tensor
    are reported when the Session is created.
    """
    if mode is None or not isinstance(mode, bool | str):
        raise TypeError(f"in_sequence expects True, False or 'pass', got {mode!r}")
    _ctx.sequence.append((mode, next(_region_ids)))
    try:
        yield
    finally:
        _ctx.sequence.pop()


def sequence_region() -> int | None:
    """Id of the innermost active ``in_sequence(True)`` block, or None."""
    for mode, region in reversed(_ctx.sequence):
        if mode is True:
            return region
        if mode is False:
            return None
    return None


@contextlib.contextmanager
def name_scope(name: str) -> Iterator[None]:
    """Prefix the names of tensors created inside with ``name/``."""
    _ctx.scopes.append(name)
    try:
        yield
    finally:
        _ctx.scopes.pop()


def scoped_name(name: str) -> str:
    return "/".join([*_ctx.scopes, name])


@contextlib.contextmanager
def op_hints(**hints: Any) -> Iterator[None]:
    """Record ``hints`` on every op created inside (``op.hints``).

    Hints are placement and planning facts (tile set, exchange group, memory proportion) that
    do not change values; the ipu_model's cost model reads them. Inner blocks override outer ones.
    """
    _ctx.hints.append(hints)
    try:
        yield
    finally:
        _ctx.hints.pop()


def current_hints() -> dict[str, Any]:
    """The hints of every enclosing ``op_hints`` block, inner ones winning."""
    merged: dict[str, Any] = {}
    for h in _ctx.hints:
        merged.update(h)
    return merged


def io_tiles() -> contextlib.AbstractContextManager[None]:
    """Place ops created inside on the IO tile set (``tensor.tile_set == "io"``).

    The simulator's values are unaffected; the placement is recorded for the ipu_model.
    """
    return op_hints(tile_set="io")


def ipu(ipu: int) -> contextlib.AbstractContextManager[None]:
    """Place ops created inside on IPU ``ipu`` (``tensor.ipu``); move tensors between IPUs with
    ``ops.ipu_copy``. The simulator runs every IPU in one process: values are unaffected."""
    if not isinstance(ipu, int) or ipu < 0:
        raise ValueError(f"ipu expects a non-negative int, got {ipu!r}")
    return op_hints(ipu=ipu)


class Context:
    """What PopXL's ``get_current_context()`` answers about where ops go now (read-only)."""

    @property
    def graph(self) -> Graph:
        """The current graph (``get_current_graph()``)."""
        return get_current_graph()

    @property
    def main_graph(self) -> Graph:
        return get_main_graph()

    @property
    def ipu_id(self) -> int:
        """The IPU of the innermost ``ipu(...)`` block (0 outside any)."""
        return int(current_hints().get("ipu", 0))

    @property
    def io_tile_set(self) -> bool:
        """Whether ops go on the IO tiles (inside ``io_tiles()``)."""
        return current_hints().get("tile_set") == "io"

    @property
    def name_scopes(self) -> list[str]:
        return list(_ctx.scopes)

    @property
    def in_sequence(self) -> bool:
        return sequence_region() is not None


_CONTEXT = Context()
_F = TypeVar("_F")


def get_current_context() -> Context:
    """PopXL's context object: ``.graph``, ``.main_graph``, ``.ipu_id``, ``.io_tile_set``,
    ``.name_scopes``, ``.in_sequence``, all read from this thread's stacks."""
    return _CONTEXT


def op_debug_context(name: Any) -> Any:
    """PopXL's decorator for functions that build ops (``@op_debug_context`` or
    ``@op_debug_context("name")``): errors raised while the function builds name the line
    that called it, as for xlgraph's own ops, not a line inside it."""
    def decorate(fn: _F) -> _F:
        skip_in_source_lines(fn)  # type: ignore[arg-type]

        @functools.wraps(fn)  # type: ignore[arg-type]
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)  # type: ignore[operator]

        skip_in_source_lines(wrapper)
        return wrapper  # type: ignore[return-value]

    if callable(name):
        return decorate(name)
    if not isinstance(name, str):
        raise TypeError(f"op_debug_context expects a function or a name, got {name!r}")
    return decorate
