"""The report page's HTML: the document around the charts (plotly.js, styles and the page's
script inline, so one file works offline) and the tables. User text is escaped everywhere."""

from __future__ import annotations

import html
from collections.abc import Sequence
from importlib import resources
from typing import Any

from xlgraph.ipu.profile_file import NOTE

__all__ = ["Column", "document", "figure_div", "table", "escape"]

Column = tuple[str, str, bool]  # (key, heading, numeric)


def escape(text: object) -> str:
    """``text`` as HTML text."""
    return html.escape(str(text), quote=True)


def _asset(name: str) -> str:
    return resources.files("xlgraph.ipu.page").joinpath(name).read_text(encoding="utf-8")


def figure_div(fig: Any, div_id: str) -> str:
    """``fig`` as a div that draws itself with the page's inline plotly.js."""
    import plotly.io as pio

    return pio.to_html(fig, include_plotlyjs=False, full_html=False, div_id=div_id,
                       validate=False, config={"displaylogo": False, "responsive": True})


def _cell(value: Any, numeric: bool) -> str:
    if not numeric:
        return f"<td>{escape(value)}</td>"
    if isinstance(value, float) and not value.is_integer():
        shown = f"{value:,.1f}" if abs(value) < 100 else f"{value:,.0f}"
    else:
        shown = f"{int(value):,}"
    return f'<td class="num" data-value="{float(value)!r}">{shown}</td>'


def table(table_id: str, columns: Sequence[Column], rows: Sequence[dict[str, Any]],
          row_attrs: Sequence[dict[str, str]] | None = None, filter_box: bool = True,
          caption: str = "") -> str:
    """A sortable table (click a heading; numbers sort largest first), with a filter box that
    keeps the rows containing its text."""
    head = "".join(f'<th data-key="{escape(key)}" data-numeric="{int(num)}" '
                   f'title="sort by {escape(title)}">{escape(title)}</th>'
                   for key, title, num in columns)
    body = []
    for i, row in enumerate(rows):
        attrs = "".join(f' {escape(k)}="{escape(v)}"' for k, v in
                        (row_attrs[i] if row_attrs else {}).items())
        cells = "".join(_cell(row[key], num) for key, _, num in columns)
        body.append(f"<tr{attrs}>{cells}</tr>")
    box = (f'<input class="filter" type="search" data-table="{escape(table_id)}" '
           f'placeholder="filter rows (name, op, line...)" aria-label="filter">'
           if filter_box else "")
    cap = f"<caption>{escape(caption)}</caption>" if caption else ""
    return (f'{box}<div class="scroll"><table id="{escape(table_id)}" class="sortable">{cap}'
            f'<thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>')


def document(title: str, subtitle: str, sections: Sequence[tuple[str, str, str]]) -> str:
    """The whole page: ``sections`` are ``(id, heading, inner html)``; plotly.js, the styles
    and the page's script are inside it."""
    from plotly.offline import get_plotlyjs

    nav = " ".join(f'<a href="#{escape(sid)}">{escape(head)}</a>' for sid, head, _ in sections)
    body = "\n".join(f'<section id="{escape(sid)}" class="view"><h2>{escape(head)}</h2>'
                     f"{inner}</section>" for sid, head, inner in sections)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{escape(title)}</title><style>{_asset('page.css')}</style>"
        f'<script type="text/javascript">{get_plotlyjs()}</script></head>\n<body>'
        f"<header><h1>{escape(title)}</h1><p>{subtitle}</p>"
        f'<p class="note">All figures are {escape(NOTE)}.</p><nav>{nav}</nav></header>\n'
        f"{body}\n<script>{_asset('page.js')}</script></body></html>\n"
    )
