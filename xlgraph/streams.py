"""Host-to-device and device-to-host streams."""

from __future__ import annotations

from typing import TYPE_CHECKING

from xlgraph.context import get_ir
from xlgraph.dtypes import dtype
from xlgraph.errors import XlgraphError, user_source_line, whole_number
from xlgraph.tensor import TensorSpec

if TYPE_CHECKING:
    from xlgraph.ir import Ir

__all__ = ["HostToDeviceStream", "DeviceToHostStream", "h2d_stream", "d2h_stream"]


class _Stream:
    def __init__(self, ir: Ir, spec: TensorSpec, name: str) -> None:
        self.ir = ir
        self.spec = spec
        self.name = name

    @property
    def shape(self) -> tuple[int, ...]:
        return self.spec.shape

    @property
    def dtype(self) -> dtype:
        return self.spec.dtype

    @property
    def tensor_id(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"{type(self).__name__}[{self.name} {self.spec}]"


class HostToDeviceStream(_Stream):
    """Data sent from the host on each ``Session.run``; read on the device by ``ops.host_load``."""


class DeviceToHostStream(_Stream):
    """Data returned to the host by ``Session.run``; written on the device by ``ops.host_store``."""


def _unique(streams: list[_Stream], name: str) -> str:
    taken = {s.name for s in streams}
    if name not in taken:
        return name
    i = 0
    while f"{name}_{i}" in taken:
        i += 1
    return f"{name}_{i}"


def _stream_spec(shape: tuple[int, ...], dtype: dtype) -> TensorSpec:
    try:
        dims = tuple(whole_number(d, f"stream shape {tuple(shape)}: each dimension", 0)
                     for d in shape)
        return TensorSpec(dims, dtype)
    except XlgraphError as exc:
        raise type(exc)(f"{exc} [at {user_source_line()}]") from None


def h2d_stream(shape: tuple[int, ...], dtype: dtype, name: str | None = None) -> HostToDeviceStream:
    """Create a host-to-device stream in the current Ir (usable from any graph).

    Args:
        shape: shape of one transfer.
        dtype: element type.
        name: stream name, made unique.
    """
    ir = get_ir()
    ir.main_graph.check_mutable()
    stream = HostToDeviceStream(
        ir, _stream_spec(shape, dtype), _unique(ir.h2d_streams, name or "h2d_stream")
    )
    ir.h2d_streams.append(stream)
    return stream


def d2h_stream(shape: tuple[int, ...], dtype: dtype, name: str | None = None) -> DeviceToHostStream:
    """Create a device-to-host stream in the current Ir (same arguments as ``h2d_stream``)."""
    ir = get_ir()
    ir.main_graph.check_mutable()
    stream = DeviceToHostStream(
        ir, _stream_spec(shape, dtype), _unique(ir.d2h_streams, name or "d2h_stream")
    )
    ir.d2h_streams.append(stream)
    return stream
