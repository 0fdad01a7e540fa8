"""The IDX file format of MNIST and Fashion-MNIST: read, write, encode, decode."""

from __future__ import annotations

import gzip
import hashlib
import math
import os
import struct
from pathlib import Path

import numpy as np

PathLike = str | os.PathLike

# IDX type codes and the big-endian numpy types they stand for.
_IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
_IDX_CODES = {np.dtype(t).str[1:]: code for code, t in _IDX_TYPES.items()}


def idx_bytes(array: np.ndarray) -> bytes:
    """Encode ``array`` as the bytes of an IDX file."""
    code = _IDX_CODES.get(array.dtype.str[1:])
    if code is None or array.ndim == 0 or array.ndim > 255:
        raise ValueError(f"cannot store a {array.ndim}-D {array.dtype} array in IDX format")
    header = struct.pack(f">BBBB{array.ndim}I", 0, 0, code, array.ndim, *array.shape)
    return header + np.ascontiguousarray(array, dtype=_IDX_TYPES[code]).tobytes()


def parse_idx(data: bytes, name: str) -> np.ndarray:
    """Decode the bytes of an IDX file; ``name`` is used in error messages."""
    if len(data) < 4 or data[:2] != b"\0\0" or data[2] not in _IDX_TYPES or data[3] == 0:
        raise ValueError(f"{name}: not an IDX file (bad magic number {data[:4].hex() or 'none'})")
    ndim = data[3]
    offset = 4 + 4 * ndim
    if len(data) < offset:
        raise ValueError(f"{name}: truncated IDX header ({len(data)} bytes)")
    shape = struct.unpack(f">{ndim}I", data[4:offset])
    dtype = np.dtype(_IDX_TYPES[data[2]])
    expected = offset + math.prod(shape) * dtype.itemsize
    if len(data) != expected:
        raise ValueError(
            f"{name}: {len(data)} bytes, but an IDX file of shape {shape} has {expected}"
        )
    return np.frombuffer(data, dtype, offset=offset).reshape(shape).astype(dtype.newbyteorder("="))


def sha256(data: bytes) -> str:
    """The hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def file_bytes(path: PathLike) -> bytes:
    """The contents of ``path``, decompressed when its name ends in ``.gz``."""
    path = Path(path)
    data = path.read_bytes()
    if path.suffix == ".gz":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise ValueError(f"{path}: corrupt gzip data ({exc})") from exc
    return data


def read_idx(path: PathLike) -> np.ndarray:
    """Read an IDX file, gzip-compressed when its name ends in ``.gz``.

    Args:
        path: File to read.

    Returns:
        A native-endian array with the file's shape and element type.

    Raises:
        FileNotFoundError: When the file does not exist.
        ValueError: When the file is not a valid (or is a truncated) IDX file.
    """
    return parse_idx(file_bytes(path), str(path))


def write_idx(path: PathLike, array: np.ndarray) -> None:
    """Write ``array`` as an IDX file, gzip-compressed when the name ends in ``.gz``.

    Args:
        path: Destination file.
        array: Array of uint8, int8, int16, int32, float32 or float64 with 1 to 255 dims.

    Raises:
        ValueError: When the array's type or rank has no IDX encoding.
    """
    path = Path(path)
    data = idx_bytes(np.asarray(array))
    path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)
