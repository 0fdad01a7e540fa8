"""Shared helpers of the popxl-addons behaviour tests: run an Ir and fetch tensors."""

from __future__ import annotations

from typing import Any

import numpy as np

import xlgraph as popxl
from xlgraph import ops


def fetch(*tensors: popxl.Tensor) -> list[popxl.DeviceToHostStream]:
    """Streams that return ``tensors`` (created in the current graph)."""
    streams = []
    for t in tensors:
        s = popxl.d2h_stream(t.shape, t.dtype)
        ops.host_store(s, t)
        streams.append(s)
    return streams


def run(ir: popxl.Ir, streams: list[Any], inputs: dict | None = None) -> list[np.ndarray]:
    """One run of ``ir``: the arrays of ``streams``, in order."""
    with popxl.Session(ir, "cpu") as s:
        outs = s.run(inputs or {})
    return [outs[st] for st in streams]
