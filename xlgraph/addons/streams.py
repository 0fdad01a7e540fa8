"""``InputStreams`` / ``OutputStreams``: host streams by dotted name."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import xlgraph as popxl
from xlgraph.addons.dot_tree import DotTree

__all__ = ["InputStreams", "OutputStreams"]

S = TypeVar("S")


class _StreamsBase(DotTree[S], Generic[S]):
    """Streams made from ``name=(shape, dtype)`` or ``name=TensorSpec`` keyword arguments."""

    _make: Any = None

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        for name, spec in kwargs.items():
            if isinstance(spec, popxl.HostToDeviceStream | popxl.DeviceToHostStream):
                self.insert(name, spec)
                continue
            shape, dtype = (spec.shape, spec.dtype) if hasattr(spec, "shape") else spec
            self.insert(name, type(self)._make(shape, dtype, name))

    @classmethod
    def from_dict(cls, d: Any) -> DotTree:
        tree = cls()
        for key, value in d.items():
            tree.insert(key, value)
        return tree


class InputStreams(_StreamsBase[popxl.HostToDeviceStream]):
    """Host-to-device streams by name: ``InputStreams(x=((8, 784), popxl.float32))``."""

    _make = staticmethod(popxl.h2d_stream)


class OutputStreams(_StreamsBase[popxl.DeviceToHostStream]):
    """Device-to-host streams by name: ``OutputStreams(loss=((), popxl.float32))``."""

    _make = staticmethod(popxl.d2h_stream)
