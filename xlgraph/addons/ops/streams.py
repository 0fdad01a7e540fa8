"""Stream helpers: make a stream and load or store through it in one call."""

from __future__ import annotations

from typing import Any

import numpy as np

import xlgraph as popxl
from xlgraph import ops
from xlgraph.utils import to_numpy

__all__ = ["host_load", "host_store"]


def host_load(t: Any, dtype: popxl.dtype, name: str,
              ) -> tuple[np.ndarray | None, popxl.HostToDeviceStream, popxl.Tensor]:
    """A host-to-device stream named ``<name>_stream`` for data like ``t`` and its load.

    Args:
        t: the host data (an array; also a tensor, spec or shape, which give only the shape).
        dtype: the stream's dtype.
        name: the loaded tensor's name.

    Returns:
        ``(t as a numpy array of dtype, or None when t is not data; stream; loaded tensor)``.
    """
    if isinstance(t, popxl.Tensor | popxl.TensorSpec):
        data, shape = None, tuple(t.shape)
    elif isinstance(t, tuple) and all(isinstance(d, int) for d in t):
        data, shape = None, t
    else:
        data = to_numpy(t, dtype)  # detaches a torch tensor that requires grad
        shape = data.shape
    stream = popxl.h2d_stream(shape, dtype, f"{name}_stream")
    return data, stream, ops.host_load(stream, name)


def host_store(t: popxl.Tensor) -> popxl.DeviceToHostStream:
    """A device-to-host stream for ``t`` (named ``<t.name>_stream``) and the store into it."""
    stream = popxl.d2h_stream(t.shape, t.dtype, f"{t.name}_stream")
    ops.host_store(stream, t)
    return stream
