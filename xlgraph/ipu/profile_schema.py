"""The profile file's schema check: every field ``ProfileReport.load`` reads has its type, its
range and its length (per-tile lists have one entry per tile of the file's model), so a file
that passes prints, plots and renders as a report ``report.save`` wrote.

``check_v1(data)`` checks a version 1 document and ``check_v0(data)`` the fields of a version 0
one that its upgrade reads; each raises ``InvalidField`` naming the first bad field by its path
in the file (``operations[3].cycles``) with what it must be and what it is.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any

from xlgraph.ipu.hardware import IPUModel

__all__ = ["InvalidField", "check_v0", "check_v1", "read_model", "shown"]

MAX_BYTES = 2 ** 53  # bytes of a value or of all tiles (exact as a float)
MAX_TILE_BYTES = 2 ** 40  # bytes on one tile (so that sums over tiles fit in int64)
MAX_COUNT = 2 ** 31  # tiles spanned, steps per run


class InvalidField(Exception):
    """A field of the profile that is missing, of the wrong type or out of range."""

    def __init__(self, path: str, expected: str | None, value: Any = None, *,
                 found: str | None = None) -> None:
        """``expected`` None: the field is missing."""
        found = f"{type(value).__name__} {shown(value)}" if found is None else found
        super().__init__(f"field '{path}' is missing" if expected is None else
                         f"field '{path}' must be {expected}; got {found}")


def shown(value: Any) -> str:
    """``repr(value)`` cut to 60 characters, for a message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _get(obj: dict[str, Any], key: str, path: str) -> Any:
    if key not in obj:
        raise InvalidField(f"{path}.{key}" if path else key, None)
    return obj[key]


def _object(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidField(path, "a JSON object", value)
    return value


def _list(value: Any, path: str, length: int | None = None) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidField(path, "a JSON list", value)
    if length is not None and len(value) != length:
        raise InvalidField(path, f"a list of {length:,} entries (one per tile of the model)",
                           found=f"{len(value):,} entries")
    return value


def _int(value: Any, path: str, low: int = 0, high: int = MAX_BYTES) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidField(path, f"a whole number from {low:,} to {high:,}", value)
    return value


def _real(value: Any, path: str, none_ok: bool = False) -> None:
    if value is None and none_ok:
        return
    if (isinstance(value, bool) or not isinstance(value, numbers.Real)
            or not math.isfinite(value) or value < 0):
        raise InvalidField(path, "a finite number >= 0" + (" or null" if none_ok else ""), value)


def _str(value: Any, path: str) -> None:
    if not isinstance(value, str):
        raise InvalidField(path, "a string", value)


def read_model(value: Any, path: str = "model") -> IPUModel:
    """The ``IPUModel`` of a ``model`` field (its knobs; other keys are not read)."""
    knobs = {f.name for f in dataclasses.fields(IPUModel)}
    data = _object(value, path)
    try:
        return IPUModel(**{k: v for k, v in data.items() if k in knobs})
    except (ValueError, TypeError) as exc:
        raise InvalidField(path, "the knobs of an IPUModel", found=str(exc)) from None


def _tensors(value: Any, path: str) -> None:
    for i, t in enumerate(_list(value, path)):
        where = f"{path}[{i}]"
        t = _object(t, where)
        _str(_get(t, "name", where), f"{where}.name")
        _str(_get(t, "spec", where), f"{where}.spec")
        _int(_get(t, "bytes", where), f"{where}.bytes")


def _operations(value: Any, path: str, positions: int) -> None:
    for i, row in enumerate(_list(value, path)):
        where = f"{path}[{i}]"
        row = _object(row, where)
        for key in ("name", "op", "where"):
            _str(_get(row, key, where), f"{where}.{key}")
        for key in ("flops", "cycles"):
            if key in row:
                _real(row[key], f"{where}.{key}")
        for key, high in (("bytes", MAX_BYTES), ("executions", MAX_BYTES), ("tiles", MAX_COUNT)):
            if key in row:
                _int(row[key], f"{where}.{key}", 0, high)
        for j, p in enumerate(_list(row.get("positions", []), f"{where}.positions")):
            _int(p, f"{where}.positions[{j}]", 1, max(positions, 1))


def _steps(value: Any, path: str, kind: bool = True) -> list[dict[str, Any]]:
    """The liveness steps (positions 1, 2, ... in order); version 0's have no kind or where."""
    steps = _list(value, path)
    for i, s in enumerate(steps):
        where = f"{path}[{i}]"
        s = _object(s, where)
        _int(_get(s, "position", where), f"{where}.position", i + 1, i + 1)
        _str(_get(s, "step", where), f"{where}.step")
        for key in ("kind", "where") if kind else ():
            _str(_get(s, key, where), f"{where}.{key}")
        _int(_get(s, "bytes", where), f"{where}.bytes")
        _int(_get(s, "max_tile_bytes", where), f"{where}.max_tile_bytes")
    return steps


def _per_tile(value: Any, path: str, tiles: int) -> None:
    for t, v in enumerate(_list(value, path, tiles)):
        _int(v, f"{path}[{t}]", 0, MAX_TILE_BYTES)


def check_v1(data: dict[str, Any]) -> None:
    """Check every field a version 1 document's reader takes."""
    ipu = read_model(_get(data, "model", ""))
    tiles = ipu.tiles
    if "tiles" in data["model"] and data["model"]["tiles"] != tiles:
        raise InvalidField("model.tiles", f"num_ipus * tiles_per_ipu = {tiles:,}",
                           data["model"]["tiles"])
    for name, pair in _object(_get(data, "tile_sets", ""), "tile_sets").items():
        where = f"tile_sets.{name}"
        if len(_list(pair, where)) != 2:
            raise InvalidField(where, "[first tile, number of tiles]", pair)
        first, count = pair
        _int(first, f"{where}[0]", 0, tiles - 1)
        _int(count, f"{where}[1]", 1, tiles - first)
    memory = _object(_get(data, "memory", ""), "memory")
    for name, values in _object(_get(memory, "always_live", "memory"),
                                "memory.always_live").items():
        _per_tile(values, f"memory.always_live.{name}", tiles)
    _per_tile(_get(memory, "not_always_live_peak", "memory"), "memory.not_always_live_peak",
              tiles)
    _tensors(_get(memory, "always_live_tensors", "memory"), "memory.always_live_tensors")
    liveness = _object(_get(data, "liveness", ""), "liveness")
    steps = _steps(_get(liveness, "steps", "liveness"), "liveness.steps")
    peak = _object(_get(liveness, "peak", "liveness"), "liveness.peak")
    _tensors(_get(peak, "tensors", "liveness.peak"), "liveness.peak.tensors")
    _operations(_get(data, "operations", ""), "operations", len(steps))
    time = _object(_get(data, "time", ""), "time")
    _int(_get(time, "steps_per_run", "time"), "time.steps_per_run", 1, MAX_COUNT)
    for key in ("device_cycles_per_run", "host_cycles_per_run"):
        _real(_get(time, key, "time"), f"time.{key}")
    _real(_get(time, "host_side_seconds_per_run", "time"), "time.host_side_seconds_per_run",
          none_ok=True)


def check_v0(data: dict[str, Any]) -> None:
    """Check the fields of a version 0 document (``to_json`` before versions) that its
    upgrade to version 1 reads; ``check_v1`` checks the rest after it."""
    tiles = read_model(_get(data, "model", "")).tiles
    entries = _list(data["tiles"], "tiles", tiles)
    categories = None
    for t, entry in enumerate(entries):
        where = f"tiles[{t}]"
        entry = _object(entry, where)
        always = _object(_get(entry, "always_live", where), f"{where}.always_live")
        if categories is None:
            categories = list(always)
        if list(always) != categories:
            raise InvalidField(f"{where}.always_live", f"an object of the categories of tile 0 "
                               f"({', '.join(categories)})", list(always))
        for name, v in always.items():
            _int(v, f"{where}.always_live.{name}", 0, MAX_TILE_BYTES)
        _int(_get(entry, "not_always_live_peak", where), f"{where}.not_always_live_peak", 0,
             MAX_TILE_BYTES)
    _steps(_get(data, "liveness", ""), "liveness", kind=False)
    _operations(_get(data, "ops", ""), "ops", len(data["liveness"]))
    _int(_get(data, "steps_per_run", ""), "steps_per_run", 1, MAX_COUNT)
    for key in ("estimated_device_cycles_per_run", "estimated_host_cycles_per_run"):
        _real(_get(data, key, ""), key)
    _real(data.get("measured_host_side_seconds_per_run"), "measured_host_side_seconds_per_run",
          none_ok=True)
