"""PopXL's ``popxl.session`` module path: ``Session`` and the stream-buffer map types."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from xlgraph.runtime.session import Session
from xlgraph.streams import DeviceToHostStream, HostToDeviceStream

__all__ = ["Session", "h2dStreamBufferMaps", "d2hStreamBufferMaps"]

h2dStreamBufferMaps = Mapping[HostToDeviceStream, np.ndarray]  # noqa: N816 - PopXL's names
d2hStreamBufferMaps = Mapping[DeviceToHostStream, np.ndarray]  # noqa: N816
