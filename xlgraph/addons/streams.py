"""``InputStreams`` / ``OutputStreams``: ordered maps of host streams.

Read a stream by attribute (``s.x``), key (``s["x"]``), position (``s[0]``) or slice
(``s[1:]``); iterating yields the streams themselves, in insertion order, and ``len(s)`` counts
them (unlike a plain ``DotTree``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Generic, TypeVar

import xlgraph as popxl
from xlgraph.addons.dot_tree import DotTree

__all__ = ["InputStreams", "OutputStreams"]

S = TypeVar("S")
_STREAMS = (popxl.HostToDeviceStream, popxl.DeviceToHostStream)


class _StreamsBase(DotTree[S], Generic[S]):
    """Streams made from ``name=(shape, dtype)`` or ``name=TensorSpec`` keyword arguments."""

    _make: Any = None

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        for name, spec in kwargs.items():
            if isinstance(spec, _STREAMS):
                self.insert(name, spec)
                continue
            shape, dtype = (spec.shape, spec.dtype) if hasattr(spec, "shape") else spec
            self.insert(name, type(self)._make(shape, dtype, name))

    @classmethod
    def from_streams(cls, streams: Iterable[S]) -> _StreamsBase[S]:
        """The streams keyed by their tensor id."""
        out = cls()
        for s in streams:
            out._map[s.tensor_id] = s
        return out

    @classmethod
    def from_dict(cls, d: Any) -> DotTree:
        out = cls()
        for key, value in d.items():
            out._map[str(key)] = value
        return out

    def __getitem__(self, key: str | int | slice) -> Any:
        if isinstance(key, slice):
            return self.values_flat()[key]
        if isinstance(key, int) and not isinstance(key, bool):
            return self.values_flat()[key]
        return self.get(key)

    def __iter__(self) -> Iterator[S]:
        return iter(self.values_flat())

    def __len__(self) -> int:
        return self.len_flat()


class InputStreams(_StreamsBase[popxl.HostToDeviceStream]):
    """Host-to-device streams by name: ``InputStreams(x=((8, 784), popxl.float32))``."""

    _make = staticmethod(popxl.h2d_stream)


class OutputStreams(_StreamsBase[popxl.DeviceToHostStream]):
    """Device-to-host streams by name: ``OutputStreams(loss=((), popxl.float32))``."""

    _make = staticmethod(popxl.d2h_stream)
