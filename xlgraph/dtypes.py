"""Data types: PopXL-named dtype objects mapped onto numpy dtypes."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

__all__ = [
    "dtype",
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "half",
    "float32",
    "float",
    "float64",
    "double",
    "as_dtype",
]


class dtype:  # noqa: N801 - PopXL's public name
    """A tensor element type. Compare with `is` or `==`; convert with `as_numpy()`."""

    _by_name: dict[str, dtype] = {}
    _by_numpy: dict[np.dtype, dtype] = {}

    def __init__(self, name: str, np_dtype: Any, short: str) -> None:
        self.name = name
        self.short = short
        self._np = np.dtype(np_dtype)
        dtype._by_name[name] = self
        dtype._by_numpy[self._np] = self

    @property
    def is_floating_point(self) -> bool:
        return self._np.kind == "f"

    @property
    def is_int(self) -> bool:
        return self._np.kind in "iu"

    @property
    def is_signed(self) -> bool:
        return self._np.kind in "if"

    @property
    def is_complex(self) -> bool:
        return False

    def as_numpy(self) -> np.dtype:
        """The numpy dtype this maps to."""
        return self._np

    @classmethod
    def from_name(cls, name: str) -> dtype:
        """Look a dtype up by its name, e.g. ``"float32"``."""
        if name not in cls._by_name:
            raise ValueError(f"unknown dtype name {name!r}; known: {sorted(cls._by_name)}")
        return cls._by_name[name]

    def __repr__(self) -> str:
        return f"xlgraph.dtypes.{self.name}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (dtype.from_name, (self.name,))


bool = dtype("bool", np.bool_, "bool")  # noqa: A001 - PopXL's public name
int8 = dtype("int8", np.int8, "i8")
int16 = dtype("int16", np.int16, "i16")
int32 = dtype("int32", np.int32, "i32")
int64 = dtype("int64", np.int64, "i64")
uint8 = dtype("uint8", np.uint8, "u8")
uint16 = dtype("uint16", np.uint16, "u16")
uint32 = dtype("uint32", np.uint32, "u32")
uint64 = dtype("uint64", np.uint64, "u64")
float16 = dtype("float16", np.float16, "f16")
float32 = dtype("float32", np.float32, "f32")
float64 = dtype("float64", np.float64, "f64")
half = float16
float = float32  # noqa: A001 - PopXL's public name
double = float64

_DOWNCAST = {float64: float32, int64: int32, uint64: uint32}


def as_dtype(value: Any) -> dtype:
    """Convert a dtype, numpy dtype, Python type or dtype name into an xlgraph dtype."""
    if isinstance(value, dtype):
        return value
    if isinstance(value, str):
        return dtype.from_name(value)
    if value is builtins.float:
        return float32
    if value is builtins.int:
        return int32
    if value is builtins.bool:
        return bool
    try:
        return dtype._by_numpy[np.dtype(value)]
    except (TypeError, KeyError) as exc:
        raise TypeError(f"cannot convert {value!r} to an xlgraph dtype") from exc


def downcast(dt: dtype) -> dtype:
    """The 32-bit dtype that 64-bit host data is stored as on the device."""
    return _DOWNCAST.get(dt, dt)


def of_array(data: np.ndarray) -> dtype:
    """The xlgraph dtype of a numpy array."""
    return as_dtype(data.dtype)
