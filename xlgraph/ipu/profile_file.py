"""The profile file: a ``ProfileReport`` as one versioned JSON document, and back.

``report.save(path)`` writes ``to_dict(report)``; ``load(path)`` reads this version and older
ones. Version 1 is described field by field in docs/ipu_model.md ("The profile file"). Version
0 is what ``report.to_json()`` wrote before the file had a version (a ``tiles`` list, ``ops``
and ``estimated_*`` keys); it is upgraded on reading, without what it did not record (the
tensors at the peak, the user lines of steps, each op's steps). A newer version, or a JSON
document that is not a profile, is refused with an error naming what was found.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from xlgraph.errors import ProfileFormatError
from xlgraph.ipu.cycles import CycleEstimate, OpRow
from xlgraph.ipu.profile_schema import InvalidField, check_v0, check_v1, read_model, shown

if TYPE_CHECKING:
    from xlgraph.ipu.report_data import _ReportFacts

__all__ = ["SCHEMA", "VERSION", "READS", "NOTE", "to_dict", "from_dict", "read"]

NOTE = ("estimates of the xlgraph IPU model (not measurements: no instruction overheads, "
        "bank conflicts, code loading or host framework time)")

SCHEMA = "xlgraph-profile"
VERSION = 1
READS = (0, 1)  # the schema versions ``from_dict`` reads

R = TypeVar("R", bound="_ReportFacts")  # the report class ``from_dict`` makes


def to_dict(report: _ReportFacts) -> dict[str, Any]:
    """``report`` as schema ``VERSION``: plain JSON data."""
    model = report.model
    split = report.end_to_end()
    return {
        "schema": SCHEMA, "version": VERSION, "note": NOTE,
        "model": {**dataclasses.asdict(model), "tiles": model.tiles,
                  "description": model.describe()},
        "tile_sets": {k: list(v) for k, v in report.tile_sets.items()},
        "memory": {
            "capacity_bytes_per_tile": model.memory_bytes_per_tile,
            "always_live": {k: v.tolist() for k, v in report.always_live.items()},
            "not_always_live_peak": report.not_always_live_peak.tolist(),
            "always_live_tensors": report.always_live_tensors,
        },
        "liveness": {"steps": report.steps,
                     "peak": {"position": report.peak_position,
                              "bytes": max((s["bytes"] for s in report.steps), default=0),
                              "tensors": report.peak_tensors}},
        "operations": [r.to_json() for r in report.cycles.rows],
        "time": {
            "steps_per_run": report.steps_per_run,
            "cycles_per_run": report.cycles.total,
            "device_cycles_per_run": report.cycles.device_cycles,
            "host_cycles_per_run": report.cycles.host_cycles,
            "seconds_per_run": report.estimated_seconds_per_run,
            "host_side_seconds_per_run": report.host_side_s_per_run,
            "end_to_end_seconds_per_run": split,
        },
    }


def _rows(ops: list[dict[str, Any]]) -> list[OpRow]:
    fields = {f.name for f in dataclasses.fields(OpRow)}
    return [OpRow(**{k: v for k, v in op.items() if k in fields}) for op in ops]


def _from_v1(data: dict[str, Any], cls: type[R]) -> R:
    ipu = read_model(data["model"])
    memory, liveness, time = data["memory"], data["liveness"], data["time"]
    cycles = CycleEstimate(_rows(data["operations"]), time["device_cycles_per_run"],
                           time["host_cycles_per_run"])
    report = cls(
        ipu, cycles, time["steps_per_run"],
        always_live={k: np.asarray(v, np.int64) for k, v in memory["always_live"].items()},
        not_always_live_peak=np.asarray(memory["not_always_live_peak"], np.int64),
        steps=liveness["steps"], peak_tensors=liveness["peak"]["tensors"],
        always_live_tensors=memory["always_live_tensors"],
        tile_sets={k: (int(v[0]), int(v[1])) for k, v in data["tile_sets"].items()})
    report.host_side_s_per_run = time["host_side_seconds_per_run"]
    return report


def _upgrade_v0(data: dict[str, Any]) -> dict[str, Any]:
    """Version 0 (``to_json`` before versions) as version 1."""
    tiles = data["tiles"]
    ipu = read_model(data["model"])
    categories = list(tiles[0]["always_live"]) if tiles else []
    steps = [{"position": s["position"], "step": s["step"], "kind": "", "where": "",
              "bytes": s["bytes"], "max_tile_bytes": s["max_tile_bytes"]}
             for s in data["liveness"]]
    sizes = [s["bytes"] for s in steps]
    return {
        "schema": SCHEMA, "version": 1, "model": dataclasses.asdict(ipu),
        "tile_sets": {"compute": [0, ipu.tiles], "io": [0, ipu.tiles]},
        "memory": {"always_live": {c: [t["always_live"][c] for t in tiles] for c in categories},
                   "not_always_live_peak": [t["not_always_live_peak"] for t in tiles],
                   "always_live_tensors": []},
        "liveness": {"steps": steps, "peak": {"position": int(np.argmax(sizes)) + 1 if sizes
                                              else 0, "bytes": max(sizes, default=0),
                                              "tensors": []}},
        "operations": data["ops"],
        "time": {"steps_per_run": data["steps_per_run"],
                 "device_cycles_per_run": data["estimated_device_cycles_per_run"],
                 "host_cycles_per_run": data["estimated_host_cycles_per_run"],
                 "host_side_seconds_per_run": data.get("measured_host_side_seconds_per_run")},
    }


def from_dict(data: Any, cls: type[R], source: str = "the data") -> R:
    """The report (a ``cls``) in ``data`` (schema version 0 or 1) read from ``source``.

    Raises:
        ProfileFormatError: ``data`` is not a profile, of a version not in ``READS``, or a
            field is missing, of the wrong type or out of range (``profile_schema``).
    """
    if not isinstance(data, dict):
        raise ProfileFormatError(f"{source} is not an xlgraph profile: expected a JSON object, "
                                 f"got {type(data).__name__}")
    schema, version = data.get("schema"), data.get("version")
    old = schema is None and {"tiles", "ops", "estimated_cycles_per_run"} <= set(data)
    if old:
        schema, version = SCHEMA, 0
    if schema != SCHEMA:
        raise ProfileFormatError(f"{source} is not an xlgraph profile: its 'schema' is "
                                 f"{shown(schema)}, expected {SCHEMA!r} (report.save writes one)")
    if type(version) is not int or version not in READS:
        newer = type(version) is int and version > VERSION
        raise ProfileFormatError(
            f"{source} has {SCHEMA} schema version {shown(version)}, which this xlgraph does "
            f"not read (it reads versions {', '.join(map(str, READS))})"
            + ("; it was written by a newer xlgraph: upgrade xlgraph to read it" if newer
               else ""))
    try:
        if old:
            check_v0(data)
            data = _upgrade_v0(data)
        check_v1(data)
        return _from_v1(data, cls)
    except InvalidField as exc:
        raise ProfileFormatError(f"{source}: not a valid {SCHEMA} version {version} document: "
                                 f"{exc}") from None


def read(path: str | Path) -> Any:
    """The JSON document in ``path``.

    Raises:
        ProfileFormatError: not JSON.
    """
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProfileFormatError(
            f"{path} is not an xlgraph profile: not JSON ({exc}); PopVision's profile.pop "
            f"files are not read, only the JSON that report.save writes") from None
    except RecursionError:
        raise ProfileFormatError(f"{path} is not an xlgraph profile: its JSON nests too "
                                 f"deeply to read") from None
