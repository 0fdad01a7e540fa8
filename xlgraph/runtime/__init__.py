"""Runtime: simulated devices and the Session."""

from xlgraph.runtime.device import Device, DeviceSpec, make_device
from xlgraph.runtime.session import Session

__all__ = ["Device", "DeviceSpec", "Session", "make_device"]
