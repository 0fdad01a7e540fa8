"""The report page's charts as plotly figures: tile memory map, memory by category, liveness,
time split, and the compare page's differences. Every label shows user text escaped.

Figures are plotly's JSON as plain dicts (``{"data": [...], "layout": {...}}``), which plotly.js
draws: building them through ``plotly.graph_objects`` validated every per-tile value, seconds
for a 1,472-tile chip."""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from xlgraph.ipu.report_plot import byte_unit, format_bytes

if TYPE_CHECKING:
    from xlgraph.ipu.report_data import _ReportFacts

__all__ = ["tile_map", "categories", "liveness", "time_split", "category_diff", "cycles_diff"]

TILE_COLUMNS = 64  # a 1,472-tile chip draws as 23 rows of 64 tiles
OVER = "#d62728"  # tiles over capacity, the peak marker
_AXIS = {"gridcolor": "#ebebeb", "zerolinecolor": "#cfcfcf", "automargin": True}
Figure = dict[str, Any]


def _layout(title: str, height: int, **extra: Any) -> dict[str, Any]:
    """A white layout with a small title; axes (``xaxis``, ``yaxis2``...) get light grids."""
    layout: dict[str, Any] = {
        "paper_bgcolor": "white", "plot_bgcolor": "white", "height": height,
        "font": {"size": 12, "color": "#2a3f5f"}, "hovermode": "closest",
        "margin": {"l": 60, "r": 30, "t": 50, "b": 45},
        "title": {"text": title, "font": {"size": 13}, "x": 0.01, "xanchor": "left"},
        "xaxis": dict(_AXIS), "yaxis": dict(_AXIS)}
    for key, value in extra.items():
        if key.startswith(("xaxis", "yaxis")):
            layout[key] = {**_AXIS, **value}
        else:
            layout[key] = value
    return layout


def _text(name: str) -> str:
    """User text for a hover label or title: escaped, so it shows as written."""
    return html.escape(str(name), quote=True)


def tile_map(report: _ReportFacts, title: str | None = None, width: int = 900) -> Figure:
    """Every tile as one square, coloured by its peak bytes; tiles over capacity outlined red.
    The colour scale runs to the fullest tile (or the capacity, whichever is less) and the
    title gives the capacity and the fullest tile's share of it. Squares are sized for a map
    about ``width`` pixels wide."""
    tiles = report.model.tiles
    peak = report.peak
    capacity = report.model.memory_bytes_per_tile
    cols = min(TILE_COLUMNS, tiles)
    rows = math.ceil(tiles / cols)
    index = np.arange(tiles)
    top = float(max(min(peak.max(initial=0), capacity), 1))
    fullest = int(np.argmax(peak))
    names = [_text(k) for k in report.always_live]
    hover = []
    for t in range(tiles):
        parts = "<br>".join(f"{n}: {int(v[t]):,} B" for n, v in zip(names,
                                                                     report.always_live.values()))
        hover.append(f"<b>tile {t}</b>: {int(peak[t]):,} B at peak, "
                     f"{100 * peak[t] / capacity:.2f}% of {format_bytes(capacity)}<br>"
                     f"always-live:<br>{parts}<br>"
                     f"not-always-live peak: {int(report.not_always_live_peak[t]):,} B")
    over = peak > capacity
    size = max(4, min(40, int(width / cols) - 2))
    ticks = np.linspace(0, top, 5)
    marker = {"symbol": "square", "size": size, "color": peak.tolist(), "cmin": 0, "cmax": top,
              "colorscale": "Viridis",
              "line": {"color": [OVER if o else "rgba(0,0,0,0)" for o in over],
                       "width": [2 if o else 0 for o in over]},
              "colorbar": {"title": {"text": f"peak bytes<br>(capacity<br>"
                                             f"{format_bytes(capacity)})", "side": "top"},
                           "tickvals": ticks.tolist(),
                           "ticktext": [format_bytes(v) for v in ticks]}}
    share = 100 * peak[fullest] / capacity
    if title is None:
        title = (f"{tiles:,} tiles; fullest tile {fullest}: {format_bytes(peak[fullest])} = "
                 f"{share:.1f}% of {format_bytes(capacity)}; {int(over.sum())} over capacity "
                 f"(outlined red)")
    hidden = {"visible": False, "range": [-1, cols]}
    return {"data": [{"type": "scatter", "x": (index % cols).tolist(),
                      "y": (index // cols).tolist(), "mode": "markers", "marker": marker,
                      "text": hover, "hoverinfo": "text", "name": "tiles",
                      "showlegend": False}],
            "layout": _layout(title, max(180, rows * (size + 2) + 110), xaxis=hidden,
                              yaxis={"visible": False, "autorange": "reversed",
                                     "scaleanchor": "x"})}


def _bars(names: list[str], values: list[int], total: int,
          axis: str) -> tuple[dict[str, Any], str]:
    unit, size = byte_unit(max(values, default=0))
    return {"type": "bar", "y": names, "x": [v / size for v in values], "orientation": "h",
            "showlegend": False, "xaxis": f"x{axis}", "yaxis": f"y{axis}",
            "marker": {"color": ["#1f77b4"] * (len(names) - 1) + ["#bbbbbb"]},
            "text": [format_bytes(v) for v in values], "textposition": "auto",
            "hovertext": [f"{n}: {v:,} B ({100 * v / max(total, 1):.1f}% of {total:,} B)"
                          for n, v in zip(names, values)], "hoverinfo": "text"}, unit


def categories(report: _ReportFacts) -> Figure:
    """Bytes by category over all tiles and on the fullest tile: always-live categories and
    the not-always-live peak."""
    names = [_text(k) for k in report.always_live] + ["not-always-live peak"]
    peak = report.peak
    fullest = int(np.argmax(peak))
    everywhere = ([int(v.sum()) for v in report.always_live.values()]
                  + [max((s["bytes"] for s in report.steps), default=0)])
    one = ([int(v[fullest]) for v in report.always_live.values()]
           + [int(report.not_always_live_peak[fullest])])
    left, unit_left = _bars(names, everywhere, int(peak.sum()), "")
    right, unit_right = _bars(names, one, int(peak[fullest]), "2")
    notes = [{"text": text, "x": x, "y": 1.0, "xref": "paper", "yref": "paper",
              "showarrow": False, "yanchor": "bottom", "font": {"size": 13}}
             for text, x in (("all tiles", 0.2), (f"fullest tile ({fullest})", 0.8))]
    return {"data": [left, right],
            "layout": _layout("Memory by category: always-live, and the not-always-live peak",
                              330, annotations=notes,
                              xaxis={"domain": [0.0, 0.4], "title": {"text": unit_left}},
                              xaxis2={"domain": [0.6, 1.0], "anchor": "y2",
                                      "title": {"text": unit_right}},
                              yaxis={"anchor": "x"}, yaxis2={"anchor": "x2"})}


def liveness(report: _ReportFacts, title: str | None = None) -> Figure:
    """Not-always-live bytes of all tiles per program step, the peak marked."""
    steps = report.steps
    unit, size = byte_unit(max((s["bytes"] for s in steps), default=0))
    hover = [f"step {s['position']}: {_text(s['step'])} ({_text(s['kind'])})"
             + (f" at {_text(s['where'])}" if s["where"] else "")
             + f"<br>{s['bytes']:,} B live (all tiles)<br>fullest tile {s['max_tile_bytes']:,} B"
             for s in steps]
    data = [{"type": "scatter", "x": [s["position"] for s in steps],
             "y": [s["bytes"] / size for s in steps], "mode": "lines",
             "line": {"width": 1.5, "shape": "hv"}, "text": hover, "hoverinfo": "text",
             "name": "live bytes"}]
    peak = report.peak_position
    if peak:
        data.append({"type": "scatter", "x": [peak], "y": [steps[peak - 1]["bytes"] / size],
                     "mode": "markers", "name": "peak", "text": [hover[peak - 1]],
                     "hoverinfo": "text",
                     "marker": {"color": OVER, "size": 11, "symbol": "star"}})
    always = int(report.always_live_total.sum())
    if title is None:
        title = (f"Not-always-live memory (all tiles) per program step; peak "
                 f"{format_bytes(steps[peak - 1]['bytes']) if peak else '0 B'} at step {peak} "
                 f"(red star); always-live {format_bytes(always)} on top")
    return {"data": data,
            "layout": _layout(title, 340, showlegend=False,
                              xaxis={"title": {"text": "program step"}},
                              yaxis={"title": {"text": unit}})}


def time_split(report: _ReportFacts) -> Figure:
    """Microseconds per run: host side (measured, when runs were), host link and device."""
    split = report.end_to_end()
    measured = report.host_side_s_per_run is not None
    parts = [("device (modelled)", split["device"]), ("host link (modelled)", split["host_link"])]
    if measured:
        parts.append(("host side (measured)", split["host_side"]))
    total = sum(v for _, v in parts) or 1.0
    colours = ("#2ca02c", "#ff7f0e", "#9467bd")
    data = [{"type": "bar", "y": ["per run"], "x": [seconds * 1e6], "orientation": "h",
             "name": name, "marker": {"color": colour}, "text": [f"{seconds * 1e6:,.1f} us"],
             "textposition": "inside", "hoverinfo": "text",
             "hovertext": [f"{name}: {seconds * 1e6:,.2f} us per run "
                           f"({100 * seconds / total:.1f}%)"]}
            for (name, seconds), colour in zip(parts, colours)]
    note = "" if measured else " (host side not measured: no runs yet)"
    return {"data": data,
            "layout": _layout(f"Time per run: {total * 1e6:,.1f} us{note}", 230,
                              barmode="stack", legend={"orientation": "h", "y": -0.5},
                              xaxis={"title": {"text": "microseconds per run"}})}


def category_diff(before: _ReportFacts, after: _ReportFacts,
                  names: tuple[str, str] = ("before", "after")) -> Figure:
    """Bytes by category (all tiles) of both reports, side by side."""
    keys = list(dict.fromkeys([*before.always_live, *after.always_live]))

    def values(r: _ReportFacts) -> list[int]:
        zero = np.zeros(1, np.int64)
        return ([int(r.always_live.get(k, zero).sum()) for k in keys]
                + [max((s["bytes"] for s in r.steps), default=0)])

    labels = [_text(k) for k in keys] + ["not-always-live peak"]
    a, b = values(before), values(after)
    unit, size = byte_unit(max(a + b, default=0))
    data = [{"type": "bar", "x": labels, "y": [v / size for v in vals], "name": _text(name),
             "marker": {"color": colour}, "hoverinfo": "text",
             "hovertext": [f"{_text(name)}: {n} {v:,} B" for n, v in zip(labels, vals)]}
            for name, vals, colour in ((names[0], a, "#1f77b4"), (names[1], b, "#ff7f0e"))]
    return {"data": data,
            "layout": _layout("Memory by category, all tiles", 320, barmode="group",
                              yaxis={"title": {"text": unit}})}


def cycles_diff(rows: list[dict[str, Any]], count: int = 20) -> Figure:
    """The ``count`` largest changes of estimated cycles per operation (after - before)."""
    top = sorted(rows, key=lambda r: -abs(r["delta"]))[:count][::-1]
    data = [{"type": "bar", "y": [_text(r["name"]) for r in top],
             "x": [r["delta"] for r in top], "orientation": "h", "hoverinfo": "text",
             "marker": {"color": [OVER if r["delta"] > 0 else "#2ca02c" for r in top]},
             "hovertext": [f"{_text(r['name'])}: {r['before']:,.0f} -> {r['after']:,.0f} "
                           f"cycles ({r['delta']:+,.0f})" for r in top]}]
    return {"data": data,
            "layout": _layout(f"Largest changes in estimated cycles per operation (top "
                              f"{len(top)}; red: more cycles, green: fewer)",
                              max(260, 22 * len(top) + 110),
                              xaxis={"title": {"text": "cycles per run, after - before"}},
                              yaxis={"tickfont": {"size": 10}})}
