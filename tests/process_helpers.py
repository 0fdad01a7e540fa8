"""Helpers for tests that start processes."""

from __future__ import annotations

import os
import time


def gone(pid: int, timeout: float = 5.0) -> bool:
    """Whether process ``pid`` ends (and is reaped) within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False
