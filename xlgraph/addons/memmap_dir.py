"""The maps of ``memmap_dir``: one raw file ``<dir>/<name>.npy`` per variable, as popxl-addons
writes them (no ``.npy`` header), and beside it ``<name>.npy.json``, the spec it was made with.

An existing map is reused only when it matches the variable: the recorded dtype and shape, or,
for a map without a record (written by popxl-addons, or copied by
``initialise_memmap_dir_from_checkpoint``), its size in bytes. Anything else is refused with
one error naming the file, both specs and the variable, and the file is left as it was.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from xlgraph.errors import MemmapError, user_source_line

__all__ = ["open_map", "spec_file"]


def spec_file(path: Path) -> Path:
    """Where the spec of map ``path`` is recorded."""
    return path.with_name(path.name + ".json")


def _spec(dtype: np.dtype, shape: tuple[int, ...]) -> str:
    return f"{dtype.name}{list(shape)}"


def _recorded(path: Path) -> tuple[np.dtype, tuple[int, ...]] | None:
    """The spec recorded for map ``path``, or None when there is no readable record."""
    try:
        record = json.loads(spec_file(path).read_text())
        return np.dtype(record["dtype"]), tuple(int(n) for n in record["shape"])
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _check(path: Path, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> None:
    nbytes = dtype.itemsize * math.prod(shape)
    recorded = _recorded(path)
    if recorded is not None and recorded != (dtype, shape):
        held = f"holds {_spec(*recorded)}"
    elif recorded is None and path.stat().st_size != nbytes:
        held = f"holds {path.stat().st_size} bytes"
    else:
        return
    raise MemmapError(
        f"variable {name!r} is {_spec(dtype, shape)} ({nbytes} bytes), but its existing memory "
        f"map {path} {held}; remove the file or choose another memmap_dir "
        f"[at {user_source_line()}]")


def open_map(path: Path, name: str, dtype: np.dtype, shape: tuple[int, ...],
             initial: Callable[[], np.ndarray], read_only: bool) -> np.memmap:
    """Variable ``name``'s map at ``path``: the existing one when it matches (read-only with
    ``read_only``), else a new one filled with ``initial()`` and its spec recorded."""
    record = not path.exists() or (not read_only and _recorded(path) is None)
    if path.exists():
        _check(path, name, dtype, shape)
        mm = np.memmap(path, dtype, "r" if read_only else "r+", shape=shape)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        mm = np.memmap(path, dtype, "w+", shape=shape)
        mm[...] = initial()
        mm.flush()
    if record:
        spec_file(path).write_text(json.dumps({"dtype": dtype.name, "shape": list(shape)}))
    return mm
