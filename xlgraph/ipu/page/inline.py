"""The report page inside a notebook: ``ProfileReport._repr_html_``.

The page ``to_html`` writes (``xlgraph.ipu.page``: plotly.js, its styles and script inline, user
text escaped) goes into a sandboxed ``iframe`` as its ``srcdoc``: the views work as on the page,
offline, and neither the page's styles and ids nor its script reach the notebook. Without
plotly the notebook shows the text summary and a one-line hint.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xlgraph.ipu.page.html import escape

if TYPE_CHECKING:
    from xlgraph.ipu.report_data import _ReportFacts

__all__ = ["report_html", "HEIGHT"]

HEIGHT = 720  # pixels: the frame shows about one view at a time and scrolls to the others


def report_html(report: _ReportFacts) -> str:
    """The report's views as notebook HTML (the page in an iframe), or, without plotly, its
    summary as text with a hint naming the extra."""
    try:
        from xlgraph.ipu.page import page_text

        page = page_text(report)
    except ImportError as exc:
        return (f"<pre>{escape(report)}</pre><p><em>{escape(exc)}: the interactive views "
                "need it.</em></p>")
    return (f'<iframe srcdoc="{escape(page)}" sandbox="allow-scripts" '
            f'title="IPU model report" style="width: 100%; height: {HEIGHT}px; '
            'border: 1px solid #ccc"></iframe>')
