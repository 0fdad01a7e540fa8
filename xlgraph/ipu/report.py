"""``session.report()``: the modelled IPU's memory and cycles, as text, JSON and plots.

The views follow PopVision Graph Analyser's: memory per tile (always-live and not-always-live),
the liveness curve over program steps, and an operations summary (flops, bytes, cycles per op).
Every figure is an estimate of the model in ``xlgraph.ipu``, not a measurement.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from xlgraph.ipu.cycles import CycleEstimate, OpRow
from xlgraph.ipu.memory import MemoryProfile
from xlgraph.listing import printable

__all__ = ["ProfileReport"]

_NOTE = ("estimates of the xlgraph IPU model (not measurements: no instruction overheads, "
         "bank conflicts, code loading or host framework time)")


def _label(name: str) -> str:
    """A plot label showing a (user) name as written: one line, ``$`` not read as mathtext."""
    return printable(name).replace("$", r"\$")


class ProfileReport:
    """Memory and cycle estimates of one Session's program on its ``IPUModel``.

    ``str(report)`` is a summary; ``to_json()`` the full data (``tiles``, ``liveness``,
    ``ops``, ``estimated_cycles_per_run``); ``plot(path)`` draws it (needs matplotlib).
    """

    def __init__(self, memory: MemoryProfile, cycles: CycleEstimate, steps_per_run: int) -> None:
        self.memory = memory
        self.cycles = cycles
        self.model = memory.model
        self.steps_per_run = steps_per_run
        self.host_side_s_per_run: float | None = None  # measured by the Session's runs

    # -- figures ---------------------------------------------------------------------------------
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
        """Not-always-live bytes (all tiles, and the fullest tile) at every step."""
        curve = self.memory.curve
        totals, fullest = curve.sum(axis=1), curve.max(axis=1)
        rows = []
        for p in range(1, curve.shape[0]):
            step = self.memory.steps[p - 1]
            name = step.op.name if step.op is not None else step.kind
            rows.append({"position": p, "step": name, "bytes": int(totals[p]),
                         "max_tile_bytes": int(fullest[p])})
        return rows

    def tiles(self) -> list[dict[str, Any]]:
        """Per tile: always-live bytes by category, not-always-live peak, peak and capacity."""
        always = self.memory.always_live
        peak_nal = self.memory.curve.max(axis=0)
        total = self.memory.always_live_total + peak_nal
        return [{"tile": t, "always_live": {k: int(v[t]) for k, v in always.items()},
                 "not_always_live_peak": int(peak_nal[t]), "peak": int(total[t]),
                 "capacity": self.model.memory_bytes_per_tile} for t in range(self.model.tiles)]

    def to_dict(self) -> dict[str, Any]:
        """The report as plain data (what ``to_json`` writes)."""
        return {
            "note": _NOTE,
            "model": dataclasses.asdict(self.model),
            "tiles": self.tiles(),
            "liveness": self.liveness(),
            "ops": [r.to_json() for r in self.cycles.rows],
            "estimated_cycles_per_run": self.cycles.total,
            "estimated_device_cycles_per_run": self.cycles.device_cycles,
            "estimated_host_cycles_per_run": self.cycles.host_cycles,
            "estimated_seconds_per_run": self.estimated_seconds_per_run,
            "steps_per_run": self.steps_per_run,
            "measured_host_side_seconds_per_run": self.host_side_s_per_run,
            "end_to_end_seconds_per_run": self.end_to_end(),
        }

    def to_json(self, indent: int | None = None) -> str:
        """The report as a JSON document."""
        return json.dumps(self.to_dict(), indent=indent)

    # -- text ------------------------------------------------------------------------------------
    def __str__(self) -> str:
        m, model = self.memory, self.model
        always, peak = m.always_live_total, m.peak
        cap = model.memory_bytes_per_tile
        fullest = int(np.argmax(peak))
        seconds = self.estimated_seconds_per_run
        lines = [
            f"IPU model report: {model.describe()} ({_NOTE})",
            f"Memory: {int(peak.sum()):,} bytes at peak over {model.tiles} tiles "
            f"({int(always.sum()):,} always-live); fullest tile {fullest}: {int(peak[fullest]):,}"
            f" of {cap:,} bytes ({100 * peak[fullest] / cap:.1f}%)",
            "  always-live per category (all tiles): " + ", ".join(
                f"{k} {int(v.sum()):,}" for k, v in m.always_live.items()),
            f"  not-always-live peak (all tiles): {int(m.curve.sum(axis=1).max()):,} bytes",
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
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            raise ImportError("report.plot needs matplotlib: pip install xlgraph[plot]") from None
        fig, (ax_mem, ax_live, ax_ops) = plt.subplots(3, 1, figsize=(10, 11))
        self._plot_memory(ax_mem)
        curve = self.memory.curve.sum(axis=1)[1:]
        unit, size = byte_unit(float(curve.max(initial=0)))
        ax_live.plot(np.arange(1, len(curve) + 1), curve / size, lw=1)
        ax_live.set(title="Liveness: not-always-live memory (all tiles) per program step",
                    xlabel="step", ylabel=unit)
        rows = self.cycles.rows[:15][::-1]
        ax_ops.barh(range(len(rows)), [r.cycles for r in rows])
        ax_ops.set_yticks(range(len(rows)), [user_label(r) for r in rows])
        ax_ops.set(title="Estimated cycles per run by op (top 15): op, graph and your line",
                   xlabel="cycles")
        ax_ops.tick_params(axis="y", labelsize=7)
        fig.suptitle(f"{self.model.describe()} - estimates, not measurements", fontsize=10)
        fig.tight_layout()
        return fig

    def _plot_memory(self, ax: Any) -> None:
        """Stacked bars per tile, the y axis fitted to the fullest tile (capacity noted)."""
        m, tiles = self.memory, np.arange(self.model.tiles)
        unit, size = byte_unit(float(m.peak.max(initial=0)))
        bottom = np.zeros(self.model.tiles)
        for name, values in m.always_live.items():
            ax.bar(tiles, values / size, bottom=bottom, label=f"always-live: {name}", width=1.0)
            bottom += values / size
        ax.bar(tiles, m.curve.max(axis=0) / size, bottom=bottom, label="not-always-live peak",
               width=1.0, color="lightgray")
        top = max(float(m.peak.max(initial=0)) / size, 1.0) * 1.15
        capacity = self.model.memory_bytes_per_tile
        cap_text = f"capacity {format_bytes(capacity)} per tile"
        if capacity / size <= top:
            ax.axhline(capacity / size, color="red", lw=1, label="capacity")
            top = max(top, capacity / size * 1.05)
        else:
            full = 100 * float(m.peak.max(initial=0)) / capacity
            cap_text += f", above this axis (fullest tile {full:.1f}%)"
        ax.set_ylim(0, top)
        ax.set(title=f"Memory per tile; {cap_text}", xlabel="tile", ylabel=unit)
        if self.model.tiles <= 16:
            ax.set_xticks(tiles)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))

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


_BYTE_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def byte_unit(largest: float) -> tuple[str, int]:
    """The unit (``B``, ``KiB``, ``MiB``, ``GiB``) and its size for an axis up to ``largest``."""
    return next(((u, n) for u, n in _BYTE_UNITS if largest >= n), ("B", 1))


def format_bytes(count: float) -> str:
    """``count`` bytes in the largest binary unit it fills, e.g. ``624 KiB``."""
    unit, size = byte_unit(count)
    return f"{count / size:.4g} {unit}"


def user_label(row: OpRow) -> str:
    """A cycles-chart label in the user's terms: the op, the module or graph it is in (its
    gradient graph marked), and the line of the user's program that created it."""
    graph = row.name.rpartition("/")[0]
    context = re.sub(r"_subgraph\(\d+\)", "", graph).replace("_grad", " gradient")
    text = f"{row.op} at {row.where}" if row.where else row.op
    return _label(f"{context}: {text}" if context else text)
