"""Runtime: simulated devices and the Session."""

from xlgraph.runtime.device import Device, make_device
from xlgraph.runtime.session import Session

__all__ = ["Device", "Session", "make_device"]
