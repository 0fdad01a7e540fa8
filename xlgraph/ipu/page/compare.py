"""The compare page: two reports side by side, with their differences in memory (per category,
peak, fullest tile) and in estimated cycles per operation. Operations are matched by name (the
op's name, prefixed by its graph's outside the main graph), as PopVision matches programs; an
operation in one report only is compared with nothing (0)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from xlgraph.ipu.report_plot import format_bytes

if TYPE_CHECKING:
    from xlgraph.ipu.report_data import _ReportFacts

__all__ = ["operation_diff", "compare_sections"]

DIFF_COLUMNS = (
    ("name", "operation", False), ("op", "op", False), ("in", "in", False),
    ("before", "cycles before", True), ("after", "cycles after", True),
    ("delta", "cycles change", True), ("percent", "change %", True),
    ("bytes_before", "bytes before", True), ("bytes_after", "bytes after", True),
    ("flops_before", "FLOPs before", True), ("flops_after", "FLOPs after", True),
    ("where", "user line", False))


def operation_diff(before: _ReportFacts, after: _ReportFacts,
                   names: tuple[str, str] = ("before", "after")) -> list[dict[str, Any]]:
    """Per operation (matched by name): cycles, bytes and FLOPs before and after and the
    change of cycles, largest change first."""
    a = {r.name: r for r in before.cycles.rows}
    b = {r.name: r for r in after.cycles.rows}
    rows = []
    for name in dict.fromkeys([*a, *b]):
        ra, rb = a.get(name), b.get(name)
        cb, ca = (ra.cycles if ra else 0.0), (rb.cycles if rb else 0.0)
        where = (rb or ra).where
        if ra and rb and ra.where != rb.where:
            where = f"{ra.where} -> {rb.where}"
        rows.append({
            "name": name, "op": (rb or ra).op,
            "in": "both" if ra and rb else names[0] if ra else names[1],
            "before": cb, "after": ca, "delta": ca - cb,
            "percent": 100 * (ca - cb) / cb if cb else (0.0 if not ca else 100.0),
            "bytes_before": ra.bytes if ra else 0, "bytes_after": rb.bytes if rb else 0,
            "flops_before": ra.flops if ra else 0.0, "flops_after": rb.flops if rb else 0.0,
            "where": where})
    rows.sort(key=lambda r: -abs(r["delta"]))
    return rows


def _metrics(r: _ReportFacts) -> dict[str, float]:
    peak = r.peak
    out: dict[str, float] = {
        "peak bytes, all tiles": float(peak.sum()),
        "fullest tile bytes": float(peak.max(initial=0)),
        "tiles over capacity": float((peak > r.model.memory_bytes_per_tile).sum()),
        "not-always-live peak bytes": float(max((s["bytes"] for s in r.steps), default=0)),
    }
    out.update({f"always-live {k} bytes": float(v.sum()) for k, v in r.always_live.items()})
    out.update({"cycles per run": r.cycles.total, "device cycles per run": r.cycles.device_cycles,
                "host link cycles per run": r.cycles.host_cycles,
                "steps per run (num_host_transfers)": float(r.steps_per_run),
                "cycles per step": r.cycles.total / max(r.steps_per_run, 1),
                "positions on the liveness curve": float(len(r.steps)),
                "operations": float(len(r.cycles.rows))})
    return out


def _summary_table(before: _ReportFacts, after: _ReportFacts, names: tuple[str, str]) -> str:
    from xlgraph.ipu.page.html import table

    a, b = _metrics(before), _metrics(after)
    rows = []
    for key in dict.fromkeys([*a, *b]):
        va, vb = a.get(key, 0.0), b.get(key, 0.0)
        rows.append({"metric": key, "before": va, "after": vb, "delta": vb - va,
                     "percent": 100 * (vb - va) / va if va else 0.0})
    columns = [("metric", "metric", False), ("before", names[0], True),
               ("after", names[1], True), ("delta", "change", True),
               ("percent", "change %", True)]
    return table("diff-summary-table", columns, rows, filter_box=False)


def compare_sections(before: _ReportFacts, after: _ReportFacts,
                     names: tuple[str, str]) -> list[tuple[str, str, str]]:
    """The compare page's sections: summary, side by side, categories, operations."""
    from xlgraph.ipu.page import figures
    from xlgraph.ipu.page.html import escape, figure_div, table

    diff = operation_diff(before, after, names)
    columns = []
    for key, report in zip(("before", "after"), (before, after)):
        title = escape(names[0] if key == "before" else names[1])
        peak = report.peak
        fullest = int(np.argmax(peak))
        capacity = format_bytes(report.model.memory_bytes_per_tile)
        tiles = f"Tile memory: fullest tile {fullest} {format_bytes(peak[fullest])} of {capacity}"
        live = f"Liveness: peak {format_bytes(max((s['bytes'] for s in report.steps), default=0))}"
        parts = [figure_div(figures.tile_map(report, tiles, width=420), f"{key}-tile-map"),
                 figure_div(figures.liveness(report, live), f"{key}-liveness"),
                 figure_div(figures.time_split(report), f"{key}-time-split")]
        columns.append(f'<div class="col"><h3>{title}</h3>{"".join(parts)}</div>')
    deltas = [abs(r["delta"]) for r in diff]
    changed = int(np.count_nonzero(deltas))
    return [
        ("view-diff-summary", "Summary", _summary_table(before, after, names)),
        ("view-side-by-side", "Side by side", f'<div class="columns">{"".join(columns)}</div>'),
        ("view-diff-categories", "Memory by category",
         figure_div(figures.category_diff(before, after, names), "diff-categories")),
        ("view-diff-operations", "Operations",
         figure_div(figures.cycles_diff(diff), "diff-cycles")
         + '<p class="hint">' + escape(
             f"{len(diff)} operations, {changed} with a change of cycles per run "
             f"({before.steps_per_run} steps per run before, {after.steps_per_run} after); "
             "matched by name. Click a heading to sort.") + "</p>"
         + table("diff-ops-table", DIFF_COLUMNS, diff)),
    ]
