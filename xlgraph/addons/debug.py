"""``print_tensor`` / ``print_text``: debug printing switched by ``MODEL_LOG_LEVEL``.

Both act only when the environment variable ``MODEL_LOG_LEVEL`` (``TRACE`` < ``DEBUG`` <
``INFO`` < ``WARN``; default ``INFO``) is at or below their ``level`` (default ``DEBUG``), so
they are off by default.
"""

from __future__ import annotations

import os
from typing import Any

import xlgraph as popxl
from xlgraph import ops

__all__ = ["print_tensor", "print_text", "enabled"]

_LEVELS = ("TRACE", "DEBUG", "INFO", "WARN")


def enabled(level: str) -> bool:
    """Whether ``MODEL_LOG_LEVEL`` lets messages of ``level`` through."""
    current = os.environ.get("MODEL_LOG_LEVEL", "INFO").upper()
    for name in (current, level.upper()):
        if name not in _LEVELS:
            raise ValueError(f"log level {name!r}: expected one of {list(_LEVELS)}")
    return _LEVELS.index(current) <= _LEVELS.index(level.upper())


def print_tensor(t: popxl.Tensor, *args: Any, level: str = "DEBUG", **kwargs: Any,
                 ) -> popxl.Tensor:
    """``ops.print_tensor(t, *args, **kwargs)`` when enabled; ``t`` itself otherwise."""
    if not enabled(level):
        return t
    return ops.print_tensor(t, *args, **kwargs)


def print_text(text: str, num: Any = None, level: str = "DEBUG") -> None:
    """Print ``text`` (and ``num``, when given) each time the graph runs, when enabled."""
    if enabled(level):
        value = popxl.constant(0 if num is None else num)
        ops.print_tensor(value, title=text)
