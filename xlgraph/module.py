"""``Module``: a reusable piece of graph-building code."""

from __future__ import annotations

from typing import Any

__all__ = ["Module"]


class Module:
    """Override ``build``. Calling a module runs ``build`` inline in the current graph;
    ``ir.create_graph(module, ...)`` makes a subgraph of it instead."""

    def build(self, *args: Any, **kwargs: Any) -> Any:
        """Build the module's ops in the current graph from its inputs; returns its outputs."""
        raise NotImplementedError(f"{type(self).__name__} must override Module.build")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.build(*args, **kwargs)
