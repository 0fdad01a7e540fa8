"""The report as a page people open in a browser, as PopVision's views are.

``write_report(report, path)`` (``report.to_html(path)``, ``xlgraph-report profile.json -o
report.html``) writes one self-contained HTML file: a tile memory map, memory by category,
liveness with the peak and its tensors, a sortable and filterable operation table (clicking an
operation highlights its steps on the liveness chart) and the time split. ``write_compare``
shows two reports side by side with the differences per category and per operation. The charts
are plotly's (the ``report`` extra); plotly is imported only here, when a page is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from xlgraph.ipu.report_plot import context_of, format_bytes

if TYPE_CHECKING:
    from xlgraph.ipu.report_data import _ReportFacts

__all__ = ["require_plotly", "write_report", "page_text", "write_compare", "OPERATION_COLUMNS"]

OPERATION_COLUMNS = (
    ("name", "operation", False), ("module", "module", False), ("op", "op", False),
    ("cycles", "cycles", True), ("share", "share %", True), ("flops", "FLOPs", True),
    ("bytes", "bytes", True), ("executions", "executions", True), ("tiles", "tiles", True),
    ("where", "user line", False), ("steps", "steps", False))


def require_plotly() -> None:
    """Raise a one-line ImportError naming the extra when plotly is missing."""
    try:
        import plotly  # noqa: F401
    except ImportError:
        raise ImportError("the report page needs plotly, which is not installed: "
                          "pip install 'xlgraph[report]'") from None


def _operation_rows(report: _ReportFacts) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The operation table's rows in program order, and each row's step positions."""
    total = report.cycles.total or 1.0
    order = sorted(report.cycles.rows, key=lambda r: (min(r.positions, default=1 << 60)))
    rows, attrs = [], []
    for r in order:
        steps = ",".join(map(str, r.positions))
        rows.append({"name": r.name, "module": context_of(r.name), "op": r.op,
                     "cycles": r.cycles, "share": 100 * r.cycles / total, "flops": r.flops,
                     "bytes": r.bytes, "executions": r.executions, "tiles": r.tiles,
                     "where": r.where, "steps": steps})
        attrs.append({"class": "op-row", "data-positions": steps})
    return rows, attrs


def _summary(report: _ReportFacts) -> str:
    """One line on the report, as HTML text (every value escaped)."""
    from xlgraph.ipu.page.html import escape

    peak = report.peak
    split = report.end_to_end()
    return escape(f"{report.model.describe()}: peak {format_bytes(peak.sum())} over "
                  f"{report.model.tiles:,} tiles, fullest tile {format_bytes(peak.max())}; "
                  f"{report.cycles.total:,.0f} cycles = "
                  f"{report.estimated_seconds_per_run * 1e6:,.1f} us per run "
                  f"({report.steps_per_run} steps); end to end "
                  f"{split['total'] * 1e6:,.1f} us per run")


def _tensor_table(table_id: str, tensors: list[dict[str, Any]], caption: str) -> str:
    from xlgraph.ipu.page.html import table

    total = sum(t["bytes"] for t in tensors) or 1
    rows = [{**t, "share": 100 * t["bytes"] / total} for t in tensors]
    return table(table_id, [("name", "tensor", False), ("spec", "type", False),
                            ("bytes", "bytes", True), ("share", "share %", True)], rows,
                 filter_box=False, caption=caption)


def report_sections(report: _ReportFacts, prefix: str = "") -> list[tuple[str, str, str]]:
    """The five views of one report as page sections (ids prefixed with ``prefix``)."""
    from xlgraph.ipu.page import figures
    from xlgraph.ipu.page.html import figure_div, table

    rows, attrs = _operation_rows(report)
    peak = report.peak_position
    peak_caption = (f"tensors live at the peak (step {peak}: "
                    f"{report.steps[peak - 1]['step'] if peak else '-'})")
    return [
        (f"{prefix}view-tiles", "Tile memory map",
         figure_div(figures.tile_map(report), f"{prefix}tile-map")),
        (f"{prefix}view-categories", "Memory by category",
         figure_div(figures.categories(report), f"{prefix}categories")
         + _tensor_table(f"{prefix}always-live", report.always_live_tensors[:20],
                         "the largest always-live tensors (variables, optimizer state, "
                         "constants): all tiles")),
        (f"{prefix}view-liveness", "Liveness",
         figure_div(figures.liveness(report), f"{prefix}liveness")
         + _tensor_table(f"{prefix}peak-tensors", report.peak_tensors, peak_caption)),
        (f"{prefix}view-operations", "Operations",
         '<p class="hint">Click a heading to sort, a row to highlight its steps on the '
         "liveness chart.</p>"
         + table(f"{prefix}ops-table", OPERATION_COLUMNS, rows, attrs)),
        (f"{prefix}view-time", "Time split",
         figure_div(figures.time_split(report), f"{prefix}time-split")),
    ]


def write_report(report: _ReportFacts, path: str | Path) -> Path:
    """Write ``report`` as a self-contained HTML page at ``path``.

    Raises:
        ImportError: without plotly (``pip install 'xlgraph[report]'``).
    """
    return _write_page(Path(path), page_text(report))


def page_text(report: _ReportFacts) -> str:
    """The page ``write_report`` writes, as text (a notebook shows it inline).

    Raises:
        ImportError: without plotly (``pip install 'xlgraph[report]'``).
    """
    require_plotly()
    from xlgraph.ipu.page.html import document

    return document("IPU model report", _summary(report), report_sections(report))


def write_compare(before: _ReportFacts, after: _ReportFacts, path: str | Path,
                  names: tuple[str, str] = ("before", "after")) -> Path:
    """Write a page comparing ``before`` and ``after`` at ``path``: both reports side by side,
    memory by category and cycles per operation with their differences.

    Raises:
        ImportError: without plotly (``pip install 'xlgraph[report]'``).
    """
    require_plotly()
    from xlgraph.ipu.page.compare import compare_sections
    from xlgraph.ipu.page.html import document, escape

    subtitle = (f"<b>{escape(names[0])}</b>: {_summary(before)}<br><b>{escape(names[1])}</b>: "
                f"{_summary(after)}")
    text = document("IPU model report: compare", subtitle,
                    compare_sections(before, after, names))
    return _write_page(Path(path), text)


def _write_page(path: Path, text: str) -> Path:
    """Write ``text`` at ``path``, refusing to replace a JSON document (a saved profile).

    Raises:
        FileExistsError: ``path`` holds JSON; the file is left as it was.
    """
    if path.is_file():
        with path.open("rb") as existing:
            head = existing.read(64).lstrip()
        if head.startswith(b"{"):
            raise FileExistsError(
                f"{path} holds a JSON document (a saved profile?): writing the page there "
                f"would replace it; give another path")
    path.write_text(text, encoding="utf-8")
    return path
