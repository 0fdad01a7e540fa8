"""Helpers for tests of xlgraph programs (PopXL's ``popxl.testing`` module path)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from xlgraph.ir import Ir
from xlgraph.runtime.session import Session
from xlgraph.streams import DeviceToHostStream, HostToDeviceStream

__all__ = ["run_once"]


def run_once(ir: Ir, inputs: Mapping[HostToDeviceStream, Any] | None = None,
             device_desc: str = "cpu") -> dict[DeviceToHostStream, np.ndarray]:
    """Create a Session for ``ir``, run it once and return its outputs.

    Example:
        >>> outputs = run_once(ir, {x_stream: np.ones(4, np.float32)})
    """
    session = Session(ir, device_desc)
    with session:
        return session.run(inputs)
