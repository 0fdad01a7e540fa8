"""PopART's log as PopXL programs see it: the ``popart`` logger, on stderr at or above its level
(``POPART_LOG_LEVEL``, default ``WARN``), each line ``<UTC time> popart:<channel> <pid>.<tid>
<letter>: <message>``. ``logging`` is imported only when something is logged or the level is
asked for: ``import xlgraph`` loads none of it."""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["LEVELS", "popart_logger", "devicex_debug"]

# PopART's level names and the ``logging`` levels they stand for (TRACE below DEBUG).
LEVELS = {"TRACE": 5, "DEBUG": 10, "INFO": 20, "WARN": 30, "ERR": 40, "CRITICAL": 50,
          "OFF": 100}
_LETTERS = {5: "T", 10: "D", 20: "I", 30: "W", 40: "E", 50: "C"}


def popart_logger(channel: str = "popart") -> Any:
    """The ``logging`` logger of PopART's ``channel`` (``popart.devicex`` for ``"devicex"``),
    set up on first use: the ``popart`` logger writes to the current ``sys.stderr``."""
    import logging

    root = logging.getLogger("popart")
    if not getattr(root, "_xlgraph_ready", False):
        root.addHandler(_stderr_handler(logging))
        root.propagate = False
        level = os.environ.get("POPART_LOG_LEVEL", "WARN").upper()
        root.setLevel(LEVELS.get(level, LEVELS["WARN"]))
        root._xlgraph_ready = True  # type: ignore[attr-defined]
    return root if channel == "popart" else root.getChild(channel)


def devicex_debug(message: str) -> None:
    """A ``devicex`` debug line (PopART's device messages, such as its weight transfers)."""
    log = popart_logger("devicex")
    if log.isEnabledFor(LEVELS["DEBUG"]):
        log.debug(message)


def _line(record: Any) -> str:
    """``<UTC time> popart:<channel> <pid>.<tid> <letter>: <message>``, as PopART prints."""
    import datetime

    utc = datetime.timezone.utc
    when = datetime.datetime.fromtimestamp(record.created, utc)
    channel = record.name.split(".", 1)[1] if "." in record.name else "popart"
    letter = _LETTERS.get(record.levelno, "W")
    return (f"{when:%Y-%m-%dT%H:%M:%S.%fZ} popart:{channel} {record.process}.{record.thread} "
            f"{letter}: {record.getMessage()}")


def _stderr_handler(logging: Any) -> Any:
    """A handler writing each record to ``sys.stderr`` as it is then (pytest swaps it)."""

    class Stderr(logging.Handler):
        def emit(self, record: Any) -> None:
            try:
                sys.stderr.write(_line(record) + "\n")
            except Exception:  # noqa: BLE001 - logging must never stop the program
                self.handleError(record)

    return Stderr()
