"""Data types: PopXL-named dtype objects mapped onto numpy dtypes.

The fp8 types ``float8_143`` and ``float8_152`` are Graphcore's formats, stored with the
``ml_dtypes`` types ``float8_e4m3fnuz`` and ``float8_e5m2fnuz`` (the ``fp8`` extra); they exist
without it, and only using their numpy type needs it.
"""

from __future__ import annotations

import builtins
import importlib
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
    "float8_143",
    "float8_152",
    "float16",
    "half",
    "float32",
    "float",
    "float64",
    "double",
    "complex64",
    "complex128",
    "as_dtype",
]

FP8_MISSING = "fp8 dtypes need ml_dtypes: pip install 'xlgraph[fp8]'"


def require_ml_dtypes() -> Any:
    """The ``ml_dtypes`` module, or an ImportError with a one-line install hint."""
    try:
        return importlib.import_module("ml_dtypes")
    except ImportError:
        raise ImportError(FP8_MISSING) from None


class dtype:  # noqa: N801 - PopXL's public name
    """A tensor element type. Compare with `is` or `==`; convert with `as_numpy()`.

    Args:
        name: PopXL's name, e.g. ``"float32"``.
        np_name: the numpy type's name (an ``ml_dtypes`` name for the fp8 types).
        short: the short form used in listings (``f32``).
        kind: numpy's kind letter: ``b`` bool, ``i`` signed, ``u`` unsigned, ``f`` float,
            ``c`` complex.
    """

    _by_name: dict[str, dtype] = {}
    _by_numpy: dict[np.dtype, dtype] = {}

    def __init__(self, name: str, np_name: str, short: str, kind: str) -> None:
        self.name = name
        self.short = short
        self._np_name = np_name
        self._kind = kind
        self._np: np.dtype | None = None
        dtype._by_name[name] = self
        if not name.startswith("float8"):
            self._np = np.dtype(np_name)
            dtype._by_numpy[self._np] = self

    @property
    def is_floating_point(self) -> builtins.bool:
        """Whether this is a floating-point type (float8 to float64)."""
        return self._kind == "f"

    @property
    def is_int(self) -> builtins.bool:
        """Whether this is a signed or unsigned integer type."""
        return self._kind in "iu"

    @property
    def is_signed(self) -> builtins.bool:
        """Whether values can be negative (signed integers, floats, complex)."""
        return self._kind in "ifc"

    @property
    def is_complex(self) -> builtins.bool:
        """Whether this is a complex type."""
        return self._kind == "c"

    @property
    def is_fp8(self) -> builtins.bool:
        """True for ``float8_143`` and ``float8_152``."""
        return self.name.startswith("float8")

    def as_numpy(self) -> np.dtype:
        """The numpy dtype this maps to (fp8 types need the ``fp8`` extra)."""
        if self._np is None:
            self._np = np.dtype(getattr(require_ml_dtypes(), self._np_name))
            dtype._by_numpy[self._np] = self
        return self._np

    def as_torch(self) -> Any:
        """The torch dtype this maps to (needs the ``torch`` extra)."""
        try:
            torch = importlib.import_module("torch")
        except ImportError:
            raise ImportError("as_torch needs torch: pip install 'xlgraph[torch]'") from None
        name = self._np_name if self.is_fp8 else self.name
        if not hasattr(torch, name):
            raise TypeError(f"torch has no dtype for {self!r}")
        return getattr(torch, name)

    @classmethod
    def from_name(cls, name: str) -> dtype:
        """Look a dtype up by its name, e.g. ``"float32"``."""
        if name not in cls._by_name:
            raise ValueError(f"unknown dtype name {name!r}; known: {sorted(cls._by_name)}")
        return cls._by_name[name]

    @classmethod
    def as_dtype(cls, type_value: Any) -> dtype:
        """``popxl.dtype.as_dtype(np.float32)``: the module function ``as_dtype``."""
        return as_dtype(type_value)

    def __repr__(self) -> str:
        return f"xlgraph.dtypes.{self.name}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (dtype.from_name, (self.name,))


bool = dtype("bool", "bool", "bool", "b")  # noqa: A001 - PopXL's public name
int8 = dtype("int8", "int8", "i8", "i")
int16 = dtype("int16", "int16", "i16", "i")
int32 = dtype("int32", "int32", "i32", "i")
int64 = dtype("int64", "int64", "i64", "i")
uint8 = dtype("uint8", "uint8", "u8", "u")
uint16 = dtype("uint16", "uint16", "u16", "u")
uint32 = dtype("uint32", "uint32", "u32", "u")
uint64 = dtype("uint64", "uint64", "u64", "u")
float8_143 = dtype("float8_143", "float8_e4m3fnuz", "f8_143", "f")
float8_152 = dtype("float8_152", "float8_e5m2fnuz", "f8_152", "f")
float16 = dtype("float16", "float16", "f16", "f")
float32 = dtype("float32", "float32", "f32", "f")
float64 = dtype("float64", "float64", "f64", "f")
complex64 = dtype("complex64", "complex64", "c64", "c")
complex128 = dtype("complex128", "complex128", "c128", "c")
half = float16
float = float32  # noqa: A001 - PopXL's public name
double = float64

_DOWNCAST = {float64: float32, int64: int32, uint64: uint32}
_PYTHON_TYPES = {builtins.float: float32, builtins.int: int32, builtins.bool: bool,
                 builtins.complex: complex64}


def _torch_dtype_name(value: Any) -> str | None:
    """``"float32"`` for ``torch.float32``, recognised without importing torch."""
    cls = type(value)
    if cls.__module__ == "torch" and cls.__name__ == "dtype":
        return str(value).removeprefix("torch.")
    return None


def as_dtype(value: Any) -> dtype:
    """Convert to an xlgraph dtype.

    Accepts an xlgraph dtype, a dtype name (``"float16"``), a numpy dtype or scalar type
    (``np.float16``), a Python type (``float`` is float32, ``int`` is int32) or a torch dtype.

    Raises:
        TypeError: when ``value`` names no xlgraph dtype.
    """
    if isinstance(value, dtype):
        return value
    if isinstance(value, str):
        return dtype.from_name(value)
    if isinstance(value, type) and value in _PYTHON_TYPES:
        return _PYTHON_TYPES[value]
    torch_name = _torch_dtype_name(value)
    if torch_name is not None:
        for dt in dtype._by_name.values():
            if torch_name in (dt.name, dt._np_name):
                return dt
        raise TypeError(f"torch dtype {value} has no xlgraph equivalent")
    try:
        np_dtype = np.dtype(value)
    except TypeError as exc:
        raise TypeError(f"cannot convert {value!r} to an xlgraph dtype") from exc
    if np_dtype not in dtype._by_numpy and np_dtype.kind == "V":
        for dt in (float8_143, float8_152):
            if np_dtype.name == dt._np_name:
                dt.as_numpy()
    if np_dtype not in dtype._by_numpy:
        raise TypeError(f"cannot convert {value!r} to an xlgraph dtype")
    return dtype._by_numpy[np_dtype]


def out_of_range(arr: np.ndarray, target: Any) -> Any:
    """The first value of integer ``arr`` that the integer numpy dtype ``target`` cannot hold
    (a cast would wrap it), or None."""
    target = np.dtype(target)
    if arr.dtype.kind not in "iu" or target.kind not in "iu" or arr.size == 0:
        return None
    info = np.iinfo(target)
    bad = (arr < info.min) | (arr > info.max)
    return arr[bad].flat[0] if bad.any() else None


def downcast(dt: dtype) -> dtype:
    """The 32-bit dtype that 64-bit host data is stored as on the device."""
    return _DOWNCAST.get(dt, dt)


def of_array(data: np.ndarray) -> dtype:
    """The xlgraph dtype of a numpy array."""
    return as_dtype(data.dtype)
