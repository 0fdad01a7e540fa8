"""``TaskSession.session_state`` as JSON that loads back to the same values and types.

JSON holds ``None``, bools, ints, floats (NaN and infinities too), strings, lists and dicts with
string keys. Tuples, numpy scalars and numpy arrays are written as one-key objects
``{"__xlgraph__": {...}}`` that name their type, so ``np.int64(100)`` loads back as
``np.int64(100)``, not ``'100'``. Anything else is refused, naming where it sits, before any file
is written.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from xlgraph.errors import CheckpointError

__all__ = ["encode", "decode", "check"]

_TAG = "__xlgraph__"
_ARRAY_KINDS = "biuf"  # bool, signed, unsigned, float: exact through JSON numbers


def check(info: Any, where: str = "session_state") -> None:
    """Refuse values ``encode`` cannot write (``TypeError`` naming the entry)."""
    _encode(info, where)


def encode(info: dict[str, Any]) -> str:
    """The JSON text of ``info`` (see the module docstring)."""
    return json.dumps(_encode(info, "session_state"))


def decode(data: bytes, path: str) -> dict[str, Any]:
    """The state written by ``encode``; ``CheckpointError`` naming ``path`` when it is not."""
    try:
        info = _decode(json.loads(data.decode("utf-8")))
    except (ValueError, TypeError, KeyError, RecursionError) as exc:
        raise CheckpointError(f"{path} is not a session state file written by TaskSession: "
                              f"{type(exc).__name__}: {exc}; nothing was loaded") from None
    if not isinstance(info, dict):
        raise CheckpointError(f"{path} must hold a JSON object (the session state info), got "
                              f"{type(info).__name__}; nothing was loaded")
    return info


def _encode(v: Any, where: str) -> Any:
    if v is None or isinstance(v, bool | str):
        return v
    if isinstance(v, np.ndarray | np.generic):
        return _encode_numpy(v, where)
    if isinstance(v, int | float):
        return int(v) if isinstance(v, int) else float(v)
    if isinstance(v, tuple):
        return {_TAG: {"type": "tuple", "items": [_encode(x, f"{where}[{i}]")
                                                  for i, x in enumerate(v)]}}
    if isinstance(v, list):
        return [_encode(x, f"{where}[{i}]") for i, x in enumerate(v)]
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if not isinstance(k, str):
                raise TypeError(f"{where}: key {k!r} is a {type(k).__name__}; session state keys "
                                f"are strings (JSON object keys)")
            if k == _TAG:
                raise TypeError(f"{where}: the key {_TAG!r} is reserved for typed values")
            out[k] = _encode(x, f"{where}[{k!r}]")
        return out
    raise TypeError(f"{where} is a {type(v).__name__}; session state holds None, bool, int, "
                    f"float, str, list, tuple, dict with str keys and numeric numpy values")


def _encode_numpy(v: np.ndarray | np.generic, where: str) -> Any:
    if v.dtype.kind not in _ARRAY_KINDS:
        raise TypeError(f"{where} is a numpy {v.dtype} value; session state holds bool, integer "
                        f"and float numpy values")
    kind = "array" if isinstance(v, np.ndarray) else "scalar"
    # Python's json writes NaN, the infinities and -0.0 and reads them back
    return {_TAG: {"type": kind, "dtype": v.dtype.str, "shape": list(np.shape(v)),
                   "data": v.ravel().tolist()}}


def _decode(v: Any) -> Any:
    if isinstance(v, list):
        return [_decode(x) for x in v]
    if not isinstance(v, dict):
        return v
    if set(v) != {_TAG}:
        return {k: _decode(x) for k, x in v.items()}
    tag = v[_TAG]
    if tag["type"] == "tuple":
        return tuple(_decode(x) for x in tag["items"])
    dtype = np.dtype(tag["dtype"])
    if dtype.kind not in _ARRAY_KINDS:
        raise ValueError(f"a typed value of dtype {dtype}")
    arr = np.array(tag["data"], dtype=dtype).reshape(tag["shape"])
    if tag["type"] == "scalar":
        return arr[()]
    if tag["type"] == "array":
        return arr
    raise ValueError(f"an unknown typed value {tag['type']!r}")
