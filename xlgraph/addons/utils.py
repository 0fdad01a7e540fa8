"""Small helpers: ``null_context``, ``suffix_graph_name``, ``timer`` and ``OrderedDict``."""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["null_context", "suffix_graph_name", "timer", "OrderedDict"]


@contextlib.contextmanager
def null_context() -> Iterator[None]:
    """A context manager that does nothing."""
    yield


def suffix_graph_name(name: str, suffix: str) -> str:
    """``name`` with ``_suffix`` inserted before a trailing ``_subgraph(N)``."""
    base, sep, tail = name.partition("_subgraph(")
    return f"{base}_{suffix}{sep}{tail}"


@contextlib.contextmanager
def timer(title: str | None = None, log_to_wandb: bool = True) -> Iterator[None]:
    """Print how long the block took: ``<title> took N.NNN seconds``. ``log_to_wandb`` is
    accepted and ignored (xlgraph does not log to Weights & Biases)."""
    start = time.perf_counter()
    yield
    print(f"{title or 'block'} took {time.perf_counter() - start:.3f} seconds")


class OrderedDict(collections.OrderedDict):
    """An ordered dict that can also be read by position: ``d.idx(0)`` is the first value."""

    def idx(self, idx: int) -> Any:
        """The value at position ``idx``."""
        return list(self.values())[idx]
