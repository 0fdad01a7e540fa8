"""Stream helpers: make a stream and load or store through it in one call."""

from __future__ import annotations

from typing import Any

import xlgraph as popxl
from xlgraph import ops

__all__ = ["host_load", "host_store"]


def host_load(t: popxl.Tensor | popxl.TensorSpec | Any, dtype: popxl.dtype | None = None,
              name: str | None = None) -> tuple[popxl.HostToDeviceStream, popxl.Tensor]:
    """A host-to-device stream shaped like ``t`` (a tensor, a spec or a shape) and its load.

    Returns:
        ``(stream, loaded tensor)``.
    """
    shape = tuple(t.shape) if hasattr(t, "shape") else tuple(t)
    dtype = dtype or getattr(t, "dtype", None)
    if dtype is None:
        raise ValueError(f"host_load({name!r}): give a dtype for shape {shape}")
    stream = popxl.h2d_stream(shape, dtype, name)
    return stream, ops.host_load(stream, name)


def host_store(t: popxl.Tensor) -> popxl.DeviceToHostStream:
    """A device-to-host stream for ``t`` (named ``<t.name>_stream``) and the store into it."""
    stream = popxl.d2h_stream(t.shape, t.dtype, f"{t.name}_stream")
    ops.host_store(stream, t)
    return stream
