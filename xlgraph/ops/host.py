"""Host transfers: ``host_load`` reads one transfer of an h2d stream, ``host_store`` writes one."""

from __future__ import annotations

from xlgraph.context import get_current_graph
from xlgraph.errors import GraphMismatchError, ShapeError, user_source_line
from xlgraph.op import OpDef, apply, apply1, register
from xlgraph.streams import DeviceToHostStream, HostToDeviceStream
from xlgraph.tensor import Tensor, TensorSpec


def _load_infer(*, stream: HostToDeviceStream) -> TensorSpec:
    return stream.spec


def _store_infer(t: TensorSpec, *, stream: DeviceToHostStream) -> tuple[()]:
    if t != stream.spec:
        raise ShapeError(f"stream {stream.name!r} expects {stream.spec}, got {t}")
    return ()


_HOST_LOAD = OpDef("host_load", _load_infer, None, kind="host_load")
_HOST_STORE = OpDef("host_store", _store_infer, None, side_effect=True, kind="host_store")


def _check_ir(stream: HostToDeviceStream | DeviceToHostStream, what: str) -> None:
    if not isinstance(stream, HostToDeviceStream | DeviceToHostStream):
        raise TypeError(f"{what} expects a stream, got {type(stream).__name__}")
    if stream.ir is not get_current_graph().ir:
        raise GraphMismatchError(
            f"{what}: stream {stream.name!r} belongs to another Ir [at {user_source_line()}]"
        )


@register(_HOST_LOAD)
def host_load(h2d_stream: HostToDeviceStream, name: str | None = None) -> Tensor:
    """Read the next transfer of ``h2d_stream`` (one per execution of this op)."""
    _check_ir(h2d_stream, "host_load")
    if not isinstance(h2d_stream, HostToDeviceStream):
        raise TypeError(f"host_load needs a HostToDeviceStream, got {h2d_stream!r}")
    return apply1(_HOST_LOAD, [], {"stream": h2d_stream}, name=name or h2d_stream.name)


@register(_HOST_STORE)
def host_store(d2h_stream: DeviceToHostStream, t: Tensor) -> None:
    """Send ``t`` to the host through ``d2h_stream`` (one transfer per execution)."""
    _check_ir(d2h_stream, "host_store")
    if not isinstance(d2h_stream, DeviceToHostStream):
        raise TypeError(f"host_store needs a DeviceToHostStream, got {d2h_stream!r}")
    apply(_HOST_STORE, [t], {"stream": d2h_stream})
