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

from xlgraph.ipu.profile_file import NOTE, from_dict, read, to_dict
from xlgraph.ipu.report_data import _ReportFacts
from xlgraph.ipu.report_plot import byte_unit, format_bytes, user_label

__all__ = ["ProfileReport", "byte_unit", "format_bytes", "user_label"]


class ProfileReport(_ReportFacts):
    """Memory and cycle estimates of one Session's program on its ``IPUModel``.

    ``str(report)`` is a summary; ``save(path)`` writes every fact as JSON (``to_dict`` and
    ``to_json`` give the same document) and ``ProfileReport.load(path)`` reads it back;
    ``to_html(path)`` writes a page to explore it in a browser (needs plotly); ``plot(path)``
    draws a PNG (needs matplotlib). In Jupyter a report shows the page's views inline.

    Attributes:
        model: the modelled hardware.
        always_live: per category (variables, constants, code, vertex state, exchange), the
            bytes on each tile held for the whole run.
        not_always_live_peak: per tile, the largest not-always-live bytes at any step.
        cycles: the estimate per op (``cycles.rows``, sorted by cycles; each row's
            ``positions`` are its steps on the liveness curve).
        memory: the ``MemoryProfile`` the report was made from (None for a loaded report).
    """

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
            FileExistsError: ``path`` holds a JSON document (a saved profile); it is kept.
        """
        from xlgraph.ipu.page import write_report

        return write_report(self, path)

    def _repr_html_(self) -> str:
        """Jupyter's view: the page's views inline (``xlgraph.ipu.page.inline``)."""
        from xlgraph.ipu.page.inline import report_html

        return report_html(self)

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
            f"{self.cycles.host_cycles:,.0f}); {_rate(self.steps_per_run, seconds)}",
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


def _rate(steps: int, seconds: float) -> str:
    """``steps`` per ``seconds`` as text; a run estimated at zero cycles has no rate."""
    return f"{steps / seconds:,.0f} steps/s" if seconds > 0 else "no steps/s (zero cycles)"
