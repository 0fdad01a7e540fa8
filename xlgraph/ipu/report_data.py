"""The facts of a ``ProfileReport``: memory per tile, per step and per op, and the figures
computed from them.

``ProfileReport`` (``report.py``) adds the file, the text, the plot and the page; the modules
that write those (``profile_file.py``, ``report_plot.py``, ``page/``) read a report through
this class, so they do not import ``report.py``, which imports them.
"""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np

from xlgraph.ipu.cycles import CycleEstimate, row_name
from xlgraph.ipu.hardware import IPUModel
from xlgraph.ipu.mapping import TileRange
from xlgraph.ipu.memory import MemoryProfile
from xlgraph.lower.program import Step, walk

R = TypeVar("R", bound="_ReportFacts")


class _ReportFacts:
    """The plain facts of one program's memory and cycle estimates (see ``ProfileReport``)."""

    def __init__(self, model: IPUModel, cycles: CycleEstimate, steps_per_run: int, *,
                 always_live: dict[str, np.ndarray], not_always_live_peak: np.ndarray,
                 steps: list[dict[str, Any]], peak_tensors: list[dict[str, Any]],
                 always_live_tensors: list[dict[str, Any]], tile_sets: dict[str, TileRange],
                 memory: MemoryProfile | None = None) -> None:
        self.model = model
        self.cycles = cycles
        self.steps_per_run = steps_per_run
        self.always_live = always_live
        self.not_always_live_peak = not_always_live_peak
        self.steps = steps
        self.peak_tensors = peak_tensors
        self.always_live_tensors = always_live_tensors
        self.tile_sets = tile_sets
        self.memory = memory
        self.host_side_s_per_run: float | None = None  # measured by the Session's runs

    @classmethod
    def from_profile(cls: type[R], memory: MemoryProfile, cycles: CycleEstimate,
                     steps_per_run: int) -> R:
        """The report of a program's ``memory`` profile and ``cycles`` estimate."""
        curve = memory.curve
        totals, fullest = curve.sum(axis=1), curve.max(axis=1)
        steps = []
        for p, step in enumerate(memory.steps, start=1):
            op = step.op
            steps.append({"position": p, "step": op.name if op is not None else step.kind,
                          "kind": step.kind, "where": op.created_at if op is not None else "",
                          "bytes": int(totals[p]), "max_tile_bytes": int(fullest[p])})
        positions = _row_positions(memory.steps)
        for row in cycles.rows:
            row.positions = positions.get(row.name, [])
        resident = sorted(((int(b.sum()), name, spec) for name, spec, b in memory.resident),
                          reverse=True)
        return cls(memory.model, cycles, steps_per_run,
                   always_live={k: np.asarray(v, np.int64) for k, v in memory.always_live.items()},
                   not_always_live_peak=curve.max(axis=0).astype(np.int64), steps=steps,
                   peak_tensors=_peak_tensors(memory, totals),
                   always_live_tensors=[{"name": n, "spec": s, "bytes": b}
                                        for b, n, s in resident],
                   tile_sets=dict(memory.tile_sets), memory=memory)

    # -- figures ---------------------------------------------------------------------------------
    @property
    def always_live_total(self) -> np.ndarray:
        """Always-live bytes per tile, all categories summed."""
        return sum(self.always_live.values(), np.zeros(self.model.tiles, np.int64))

    @property
    def peak(self) -> np.ndarray:
        """Peak bytes per tile: always-live plus the largest not-always-live."""
        return self.always_live_total + self.not_always_live_peak

    @property
    def peak_position(self) -> int:
        """The step (position) where the not-always-live bytes of all tiles peak (0: none)."""
        sizes = [s["bytes"] for s in self.steps]
        return int(np.argmax(sizes)) + 1 if sizes else 0

    @property
    def estimated_cycles_per_run(self) -> float:
        """Estimated cycles of one ``Session.run`` (device and host link)."""
        return self.cycles.total

    @property
    def estimated_seconds_per_run(self) -> float:
        """``estimated_cycles_per_run`` at the model's tile clock."""
        return self.cycles.total / self.model.tile_clock_frequency

    def end_to_end(self, runs: int = 1) -> dict[str, float]:
        """Seconds of ``runs`` runs in three parts: ``host_side`` (measured on this machine
        during the simulated runs: the program's Python between runs, such as its data loader,
        and the framework's inside ``run``; 0 before any run), ``host_link`` (modelled: stream
        bytes over the link plus one host round trip per run) and ``device`` (modelled), and
        their ``total``."""
        clock = self.model.tile_clock_frequency
        parts = {"host_side": (self.host_side_s_per_run or 0.0) * runs,
                 "host_link": self.cycles.host_cycles / clock * runs,
                 "device": self.cycles.device_cycles / clock * runs}
        return {**parts, "total": sum(parts.values())}

    def liveness(self) -> list[dict[str, Any]]:
        """Per program step: its ``position``, ``step`` (op name), ``kind``, ``where`` (user
        line), not-always-live ``bytes`` (all tiles) and ``max_tile_bytes`` (fullest tile)."""
        return self.steps

    def tiles(self) -> list[dict[str, Any]]:
        """Per tile: always-live bytes by category, not-always-live peak, peak and capacity."""
        total = self.peak
        return [{"tile": t, "always_live": {k: int(v[t]) for k, v in self.always_live.items()},
                 "not_always_live_peak": int(self.not_always_live_peak[t]),
                 "peak": int(total[t]), "capacity": self.model.memory_bytes_per_tile}
                for t in range(self.model.tiles)]


def _row_positions(steps: list[Step]) -> dict[str, list[int]]:
    """Op row name -> the positions of the main program's steps that run it (a compiled
    function's ops at its call)."""
    out: dict[str, list[int]] = {}
    for p, step in enumerate(steps, start=1):
        if step.kind == "func":
            inner: list[Step] = list(walk(step.func.steps))
            seen = set()
            while inner:
                s = inner.pop()
                if s.kind == "func" and s.func not in seen:
                    seen.add(s.func)
                    inner.extend(walk(s.func.steps))
                elif s.kind in ("kernel", "host_load", "host_store"):
                    names = out.setdefault(row_name(s), [])
                    if p not in names:
                        names.append(p)
        elif step.kind in ("kernel", "host_load", "host_store"):
            out.setdefault(row_name(step), []).append(p)
    return out


def _peak_tensors(memory: MemoryProfile, totals: np.ndarray) -> list[dict[str, Any]]:
    """The values live at the not-always-live peak of all tiles, largest first; bytes held
    inside a compiled function called there appear as one entry."""
    if len(totals) <= 1:
        return []
    position = int(np.argmax(totals[1:])) + 1
    live = sorted(((size, name, spec) for start, end, size, name, spec, _ in memory.live_roots
                   if start <= position <= end and size), reverse=True)
    out = [{"name": name, "spec": spec, "bytes": size} for size, name, spec in live]
    inside = int(totals[position]) - sum(size for size, _, _ in live)
    step = memory.steps[position - 1]
    if inside > 0 and step.kind == "func":
        out.append({"name": f"(inside {step.func.name})", "spec": "", "bytes": inside})
    return out
