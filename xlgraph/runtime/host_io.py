"""Validation and allocation of the host arrays exchanged with ``Session.run``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from xlgraph import dtypes
from xlgraph.errors import DTypeError, ShapeError, StreamInputError
from xlgraph.ir import Ir
from xlgraph.streams import DeviceToHostStream, HostToDeviceStream
from xlgraph.tensor import Variable
from xlgraph.utils import from_torch


def _streams_used(ir: Ir, kind: str) -> list[Any]:
    used = {id(op.attrs["stream"]) for g in ir.graphs for op in g.ops if op.defn.kind == kind}
    streams = ir.h2d_streams if kind == "host_load" else ir.d2h_streams
    return [s for s in streams if id(s) in used]


def _downcast(stream: HostToDeviceStream, arr: np.ndarray, want: np.dtype) -> np.ndarray:
    """``arr`` as ``want``; a finite float that the narrower type cannot hold (float64 1e300
    into float32) is refused, naming the stream, rather than becoming inf."""
    with np.errstate(over="ignore"):
        out = arr.astype(want)
    if arr.dtype.kind == "f" and want.kind == "f":
        bad = np.isinf(out) & np.isfinite(arr)
        if bad.any():
            raise StreamInputError(
                f"stream {stream.name!r} ({stream.spec}): the value {float(arr[bad][0])!r} does "
                f"not fit in {stream.dtype.name}; downcasting it would give inf")
    return out


class HostIO:
    """Knows which streams a Session exchanges and the host shapes they take."""

    def __init__(self, ir: Ir) -> None:
        self.transfers = ir.num_host_transfers
        self.replicas = ir.instance_replication_factor
        # the leading dimensions of every host array: transfers, then replicas, each when > 1
        self.lead = tuple(n for n in (self.transfers, self.replicas) if n > 1)
        self.expected = _streams_used(ir, "host_load")
        self.h2d = list(ir.h2d_streams)
        self.d2h = list(ir.d2h_streams)
        self._fast = [(self.h2d.index(s), s, np.dtype(s.dtype.as_numpy()), self.host_shape(s),
                       _c_strides(self.host_shape(s), s.dtype.as_numpy()))
                      for s in self.expected]
        self._out_specs = [(s, self.host_shape(s), s.dtype.as_numpy()) for s in self.d2h]

    def host_shape(self, stream: Any) -> tuple[int, ...]:
        return self.lead + stream.shape

    def _rule(self) -> str:
        n, r = self.transfers, self.replicas
        return (f"(num_host_transfers={n}, replicas={r}) + stream shape, where each leading "
                f"dimension is left out when it is 1")

    def check_inputs(self, inputs: Mapping[Any, Any], downcast: bool) -> list[np.ndarray]:
        """The input arrays in h2d-stream order (None for unused streams), C-contiguous.

        Raises:
            StreamInputError: a missing or unexpected stream, or data of the wrong shape or dtype.
        """
        if type(inputs) is not dict and not isinstance(inputs, Mapping):
            raise StreamInputError(
                f"run takes a dict {{h2d stream: array}}, got a {type(inputs).__name__}; pass "
                f"{{stream: data}} for the streams {[s.name for s in self.expected]}")
        arrays = self._check_fast(inputs)
        return self._check_slow(inputs, downcast) if arrays is None else arrays

    def _check_fast(self, inputs: Mapping[Any, Any]) -> list[np.ndarray] | None:
        """The common case, checked cheaply: exactly the expected streams, ready-made arrays."""
        if len(inputs) != len(self._fast):
            return None
        arrays: list[Any] = [None] * len(self.h2d)
        for i, stream, dtype, shape, strides in self._fast:
            arr = inputs.get(stream)
            # numpy's own dtype object and C strides: C-contiguous (anything else, such as
            # another byte order or odd strides of a length-1 axis, takes the full checks)
            if (type(arr) is not np.ndarray or arr.dtype is not dtype or arr.shape != shape
                    or arr.strides != strides):
                return None
            arrays[i] = arr
        return arrays

    def _check_slow(self, inputs: Mapping[Any, Any], downcast: bool) -> list[np.ndarray]:
        given = set(map(id, inputs))
        missing = [s.name for s in self.expected if id(s) not in given]
        expected_ids = {id(s) for s in self.expected}
        unexpected = [getattr(k, "name", repr(k)) for k in inputs if id(k) not in expected_ids]
        foreign = sorted(set(missing) & set(unexpected))
        if foreign:
            raise StreamInputError(
                f"run inputs: stream(s) {foreign} given belong to another Ir than this Session's "
                f"(same name, different stream); pass the streams of the Ir the Session runs"
            )
        if missing or unexpected:
            raise StreamInputError(
                f"run inputs do not match the expected streams: missing {missing}, "
                f"unexpected {unexpected}; expected {[s.name for s in self.expected]}"
            )
        by_id = {id(k): v for k, v in inputs.items()}
        arrays = []
        for stream in self.h2d:
            if id(stream) not in by_id:
                arrays.append(None)
                continue
            arrays.append(self._input_array(stream, by_id[id(stream)], downcast))
        return arrays

    def _input_array(self, stream: HostToDeviceStream, data: Any, downcast: bool) -> np.ndarray:
        arr = np.asarray(from_torch(data))
        want = stream.dtype.as_numpy()
        if stream.dtype.is_fp8 and arr.dtype == np.uint8:
            arr = arr.view(want)  # PopXL passes fp8 data as uint8 bits
        if not arr.dtype.isnative:
            raise StreamInputError(
                f"stream {stream.name!r} ({stream.spec}): got {arr.dtype.str} data in "
                f"non-native byte order; convert it first, e.g. "
                f"data.astype(data.dtype.newbyteorder('='))")
        if arr.dtype != want:
            known = arr.dtype.kind in "biuf"
            if not (downcast and known and dtypes.downcast(dtypes.of_array(arr)) is stream.dtype):
                got = dtypes.of_array(arr).name if known else str(arr.dtype)
                raise StreamInputError(
                    f"stream {stream.name!r} expects dtype {stream.dtype.name} "
                    f"({stream.spec}), got {got} data of shape {arr.shape}"
                )
            wrapped = dtypes.out_of_range(arr, want)
            if wrapped is not None:
                raise StreamInputError(
                    f"stream {stream.name!r} ({stream.spec}): the value {wrapped} does not fit "
                    f"in {stream.dtype.name}; downcasting it would wrap around"
                )
            arr = _downcast(stream, arr, want)
        expected = self.host_shape(stream)
        if arr.shape != expected and _squeezed(arr.shape) == _squeezed(expected):
            arr = arr.reshape(expected)  # as PopXL: a scalar feeds a (1,) stream
        if self.transfers > 1 and arr.ndim == len(expected) and arr.shape[1:] == expected[1:]:
            if arr.shape[0] < self.transfers:  # PopXL's check and words
                raise StreamInputError(
                    f"Dimension 0 ({arr.shape[0]}) for the array provided for input stream "
                    f"{stream.name} is not large enough. It should be at least of size "
                    f"num_host_transfers = {self.transfers}")
            arr = arr[:self.transfers]  # as PopXL, rows past num_host_transfers are not read
        if arr.shape != expected:
            raise StreamInputError(
                f"stream {stream.name!r} ({stream.spec}) expects host data of shape {expected}, "
                f"got {arr.shape}; the rule is {self._rule()}"
            )
        return arr if arr.flags.c_contiguous else arr.copy()  # both paths see one layout

    def new_outputs(self) -> dict[DeviceToHostStream, np.ndarray]:
        return {s: np.zeros(shape, dtype) for s, shape, dtype in self._out_specs}

    def check_outputs(self, outputs: Mapping[Any, np.ndarray]) -> list[np.ndarray]:
        arrays = []
        for stream in self.d2h:
            if stream not in outputs:
                raise StreamInputError(f"run_with_outputs: no array for stream {stream.name!r}")
            arr = outputs[stream]
            shape, dt = self.host_shape(stream), stream.dtype.as_numpy()
            if not isinstance(arr, np.ndarray) or arr.shape != shape or arr.dtype != dt:
                got = f"{arr.dtype} {arr.shape}" if isinstance(arr, np.ndarray) else type(arr)
                raise StreamInputError(
                    f"run_with_outputs: stream {stream.name!r} needs a {dt} array of shape "
                    f"{shape}, got {got}"
                )
            arrays.append(arr)
        return arrays


def _c_strides(shape: tuple[int, ...], dtype: Any) -> tuple[int, ...]:
    """The strides of a fresh C-contiguous array of ``shape`` and ``dtype``, without making
    one (a stream may be larger than memory: its data is the user's to allocate)."""
    if 0 in shape:
        return np.empty(shape, dtype).strides  # no data to allocate
    out, step = [], np.dtype(dtype).itemsize
    for d in reversed(shape):
        out.append(step)
        step *= d
    return tuple(reversed(out))


def _squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(d for d in shape if d != 1)


def variable_data(tensor: Variable, data: Any, shapes: list[Any]) -> np.ndarray:
    """``data`` for ``Session.write_variable_data``: an array of ``tensor``'s dtype (a Python
    scalar is cast; other dtypes raise ``DTypeError``, a TypeError) of one of ``shapes``
    (``ShapeError``, a ValueError, naming ``shape_on_host`` otherwise)."""
    arr = np.asarray(data)
    if arr.dtype != tensor.dtype.as_numpy():
        if arr.ndim or not isinstance(data, int | float):
            raise DTypeError(
                f"write_variable_data: {tensor.id} is {tensor.spec}, got data of dtype "
                f"{dtypes.of_array(arr).name if arr.dtype.kind in 'biuf' else arr.dtype}"
            )
        arr = arr.astype(tensor.dtype.as_numpy())
    if arr.shape not in shapes:
        raise ShapeError(
            f"write_variable_data: {tensor.id} is {tensor.spec} and takes host data of shape "
            f"{tensor.shape_on_host} (a leading dimension per replica group when there are "
            f"several), got data of shape {arr.shape}"
        )
    return arr
