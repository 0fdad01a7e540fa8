"""A tiny check collector the programs share: each program records failed expectations and
exits non-zero listing them (run through ``python -m xlgraph.popxl_compat``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

FAILS: list[str] = []


def check(name: str, cond: Any) -> None:
    """Record ``name`` when ``cond`` is false."""
    if not cond:
        FAILS.append(name)


def raises(name: str, exc: type[BaseException], fn: Callable[[], Any], match: str = "") -> None:
    """Record ``name`` unless ``fn()`` raises ``exc`` (with ``match`` in its message)."""
    try:
        fn()
    except exc as e:
        if match not in str(e):
            FAILS.append(f"{name}: message {e}")
        return
    except Exception as e:  # noqa: BLE001 - any other failure is what is reported
        FAILS.append(f"{name}: {type(e).__name__}: {e}")
        return
    FAILS.append(f"{name}: no {exc.__name__}")


def done() -> None:
    """Exit 1 naming every failed expectation, else print OK."""
    if FAILS:
        print("FAILED:", *FAILS, sep="\n  ")
        sys.exit(1)
    print("OK")
