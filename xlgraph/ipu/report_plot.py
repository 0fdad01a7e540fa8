"""``report.plot()``: the report's memory per tile, liveness and cycles by op as a matplotlib PNG.

The memory axis is fitted to the data in binary units (the capacity drawn when the fullest tile
comes near it, else stated in the title) and each op is named as in the user's program.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import numpy as np

from xlgraph.ipu.cycles import OpRow
from xlgraph.listing import printable

if TYPE_CHECKING:
    from xlgraph.ipu.report_data import _ReportFacts

__all__ = ["figure", "byte_unit", "format_bytes", "user_label", "context_of"]


def _label(name: str) -> str:
    """A plot label showing a (user) name as written: one line, ``$`` not read as mathtext."""
    return printable(name).replace("$", r"\$")


def figure(report: _ReportFacts) -> Any:
    """The matplotlib figure of ``report``: memory per tile, liveness, cycles by op.

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
    _plot_memory(report, ax_mem)
    curve = np.array([step["bytes"] for step in report.liveness()], float)
    unit, size = byte_unit(float(curve.max(initial=0)))
    ax_live.plot(np.arange(1, len(curve) + 1), curve / size, lw=1)
    ax_live.set(title="Liveness: not-always-live memory (all tiles) per program step",
                xlabel="step", ylabel=unit)
    rows = report.cycles.rows[:15][::-1]
    ax_ops.barh(range(len(rows)), [r.cycles for r in rows])
    ax_ops.set_yticks(range(len(rows)), [_label(user_label(r)) for r in rows])
    ax_ops.set(title="Estimated cycles per run by op (top 15): op, graph and your line",
               xlabel="cycles")
    ax_ops.tick_params(axis="y", labelsize=7)
    fig.suptitle(f"{report.model.describe()} - estimates, not measurements", fontsize=10)
    fig.tight_layout()
    return fig


def _plot_memory(report: _ReportFacts, ax: Any) -> None:
    """Stacked bars per tile, the y axis fitted to the fullest tile (capacity noted)."""
    tiles = np.arange(report.model.tiles)
    peak = report.peak
    unit, size = byte_unit(float(peak.max(initial=0)))
    bottom = np.zeros(report.model.tiles)
    for name, values in report.always_live.items():
        ax.bar(tiles, values / size, bottom=bottom, label=f"always-live: {name}", width=1.0)
        bottom += values / size
    ax.bar(tiles, report.not_always_live_peak / size, bottom=bottom,
           label="not-always-live peak", width=1.0, color="lightgray")
    top = max(float(peak.max(initial=0)) / size, 1.0) * 1.15
    capacity = report.model.memory_bytes_per_tile
    cap_text = f"capacity {format_bytes(capacity)} per tile"
    if capacity / size <= top:
        ax.axhline(capacity / size, color="red", lw=1, label="capacity")
        top = max(top, capacity / size * 1.05)
    else:
        full = 100 * float(peak.max(initial=0)) / capacity
        cap_text += f", above this axis (fullest tile {full:.1f}%)"
    ax.set_ylim(0, top)
    ax.set(title=f"Memory per tile; {cap_text}", xlabel="tile", ylabel=unit)
    if report.model.tiles <= 16:
        ax.set_xticks(tiles)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))


_BYTE_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def byte_unit(largest: float) -> tuple[str, int]:
    """The unit (``B``, ``KiB``, ``MiB``, ``GiB``) and its size for an axis up to ``largest``."""
    return next(((u, n) for u, n in _BYTE_UNITS if largest >= n), ("B", 1))


def format_bytes(count: float) -> str:
    """``count`` bytes in the largest binary unit it fills, e.g. ``624 KiB``."""
    unit, size = byte_unit(count)
    return f"{count / size:.4g} {unit}"


def context_of(name: str) -> str:
    """The module or graph an op row's ``name`` sits in, in the user's terms (``Linear``,
    ``Linear gradient``; empty for the main graph)."""
    graph = name.rpartition("/")[0]
    return re.sub(r"_subgraph\(\d+\)", "", graph).replace("_grad", " gradient")


def user_label(row: OpRow) -> str:
    """An op named in the user's terms: the op, the module or graph it is in (its gradient
    graph marked), and the line of the user's program that created it."""
    context = context_of(row.name)
    text = f"{row.op} at {row.where}" if row.where else row.op
    return printable(f"{context}: {text}" if context else text)
