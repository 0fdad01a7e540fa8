"""``session.report()``: the modelled IPU's memory and cycles, as text, a file, plots and a page.

The views follow PopVision Graph Analyser's: memory per tile (always-live and not-always-live),
the liveness curve over program steps, and an operations summary (flops, bytes, cycles per op).
Every figure is an estimate of the model in ``xlgraph.ipu``, not a measurement. A report holds
plain facts (numbers per tile, per step and per op), so ``save`` writes all of it and ``load``
gives back a report that prints, plots and renders as the original does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from xlgraph.ipu.cycles import CycleEstimate, row_name
from xlgraph.ipu.hardware import IPUModel
from xlgraph.ipu.mapping import TileRange
from xlgraph.ipu.memory import MemoryProfile
from xlgraph.ipu.profile_file import NOTE, from_dict, read, to_dict
from xlgraph.ipu.report_plot import byte_unit, format_bytes, user_label
from xlgraph.lower.program import Step, walk

__all__ = ["ProfileReport", "byte_unit", "format_bytes", "user_label"]


class ProfileReport:
    """Memory and cycle estimates of one Session's program on its ``IPUModel``.

    ``str(report)`` is a summary; ``save(path)`` writes every fact as JSON (``to_dict`` and
    ``to_json`` give the same document) and ``ProfileReport.load(path)`` reads it back;
    ``to_html(path)`` writes a page to explore it in a browser (needs plotly); ``plot(path)``
    draws a PNG (needs matplotlib).

    Attributes:
        model: the modelled hardware.
        always_live: per category (variables, constants, code, vertex state, exchange), the
            bytes on each tile held for the whole run.
        not_always_live_peak: per tile, the largest not-always-live bytes at any step.
        cycles: the estimate per op (``cycles.rows``, sorted by cycles; each row's
            ``positions`` are its steps on the liveness curve).
        memory: the ``MemoryProfile`` the report was made from (None for a loaded report).
    """

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
    def from_profile(cls, memory: MemoryProfile, cycles: CycleEstimate,
                     steps_per_run: int) -> ProfileReport:
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

    # -- the file --------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The report as plain data in the profile schema (docs/ipu_model.md)."""
        return to_dict(self)

    def to_json(self, indent: int | None = None) -> str:
        """The report as a JSON document in the profile schema."""
        return json.dumps(self.to_dict(), indent=indent)

    def save(self, path: str | Path) -> Path:
        """Write the report to ``path`` as JSON (``xlgraph-report path`` renders it)."""
        path = Path(path)
        path.write_text(self.to_json(indent=1), encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path) -> ProfileReport:
        """Read a report that ``save`` wrote (this schema version or an older one).

        Raises:
            ProfileFormatError: the file is not an xlgraph profile, or its schema version is
                one this xlgraph does not read (the message names it).
        """
        return from_dict(read(path), cls, str(path))

    def to_html(self, path: str | Path) -> Path:
        """Write a self-contained page (memory map, categories, liveness, operations, time)
        to ``path``; it works offline.

        Raises:
            ImportError: without plotly (``pip install xlgraph[report]``).
        """
        from xlgraph.ipu.page import write_report

        return write_report(self, path)

    # -- text ------------------------------------------------------------------------------------
    def __str__(self) -> str:
        model, always, peak = self.model, self.always_live_total, self.peak
        cap = model.memory_bytes_per_tile
        fullest = int(np.argmax(peak))
        seconds = self.estimated_seconds_per_run
        lines = [
            f"IPU model report: {model.describe()} ({NOTE})",
            f"Memory: {int(peak.sum()):,} bytes at peak over {model.tiles} tiles "
            f"({int(always.sum()):,} always-live); fullest tile {fullest}: {int(peak[fullest]):,}"
            f" of {cap:,} bytes ({100 * peak[fullest] / cap:.1f}%)",
            "  always-live per category (all tiles): " + ", ".join(
                f"{k} {int(v.sum()):,}" for k, v in self.always_live.items()),
            "  not-always-live peak (all tiles): "
            f"{max((s['bytes'] for s in self.steps), default=0):,} bytes",
            f"Estimated time per run: {self.cycles.total:,.0f} cycles = {seconds * 1e6:,.1f} us "
            f"(device {self.cycles.device_cycles:,.0f}, host link and sync "
            f"{self.cycles.host_cycles:,.0f}); {self.steps_per_run / seconds:,.0f} steps/s",
        ]
        if self.host_side_s_per_run is not None:
            split = self.end_to_end()
            big = max(("host_side", "host_link", "device"), key=split.__getitem__)
            lines.append(
                f"End to end per run: {split['total'] * 1e6:,.1f} us = host side "
                f"{split['host_side'] * 1e6:,.1f} us (measured here) + host link "
                f"{split['host_link'] * 1e6:,.1f} us + device {split['device'] * 1e6:,.1f} us "
                f"(modelled); {big.replace('_', ' ')} dominates")
        lines.append("Top ops by estimated cycles:")
        for r in self.cycles.rows[:8]:
            lines.append(f"  {r.cycles:>12,.0f} cycles {r.flops:>14,.0f} flops  x{r.executions:<5}"
                         f" {r.name} ({r.where})")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"ProfileReport({self.model.describe()}, {self.cycles.total:,.0f} cycles/run)"

    # -- plots -----------------------------------------------------------------------------------
    def figure(self) -> Any:
        """The matplotlib figure ``plot`` saves: memory per tile (its axis scaled to the data, in
        B/KiB/MiB), the liveness curve, and estimated cycles by op named by the user's code.

        Raises:
            ImportError: without matplotlib (``pip install xlgraph[plot]``).
        """
        from xlgraph.ipu.report_plot import figure

        return figure(self)

    def plot(self, path: str | Path) -> Path:
        """Draw ``figure()`` into ``path`` (a PNG).

        Raises:
            ImportError: without matplotlib (``pip install xlgraph[plot]``).
        """
        fig = self.figure()
        path = Path(path)
        fig.savefig(path, dpi=100)
        import matplotlib.pyplot as plt

        plt.close(fig)
        return path


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
