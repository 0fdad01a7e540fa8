"""PopTorch's Python logger, ``poptorch::python``: lines to stderr at the level that
``POPTORCH_LOG_LEVEL`` names when ``xlgraph.poptorch`` is imported (``WARN`` unset), or that
``poptorch.setLogLevel`` sets later."""

from __future__ import annotations

import logging
import os
import sys

__all__ = ["LEVELS", "from_environment", "logger", "set_level"]

# PopTorch's levels, by name and by number (0 to 6)
LEVELS = ("TRACE", "DEBUG", "INFO", "WARN", "ERR", "CRITICAL", "OFF")
_PYTHON_LEVELS = (logging.DEBUG, logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR,
                  logging.CRITICAL, logging.CRITICAL + 1)


class _Stderr(logging.StreamHandler):
    """Writes to the ``sys.stderr`` of the moment (a captured or redirected one too)."""

    @property
    def stream(self) -> object:  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:
        pass


logger = logging.getLogger("poptorch::python")
_handler = _Stderr()
_handler.setFormatter(logging.Formatter("[%(asctime)s] [poptorch:python] [%(levelname)s] "
                                        "%(message)s"))
logger.addHandler(_handler)
logger.propagate = False


def set_level(level: int | str) -> None:
    """Log at PopTorch's ``level``: a name of ``LEVELS`` or its index."""
    if isinstance(level, str):
        if level not in LEVELS:
            raise ValueError(f"setLogLevel: unknown level {level!r}; use one of {LEVELS}")
        level = LEVELS.index(level)
    if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level < len(LEVELS):
        raise ValueError(f"setLogLevel: a level number is 0 to {len(LEVELS) - 1}, got {level!r}")
    logger.setLevel(_PYTHON_LEVELS[level])


def from_environment() -> None:
    """Log at the level ``POPTORCH_LOG_LEVEL`` names (``WARN`` when unset or unknown)."""
    asked = os.environ.get("POPTORCH_LOG_LEVEL", "WARN").upper()
    set_level(asked if asked in LEVELS else "WARN")


from_environment()
