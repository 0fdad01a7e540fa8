"""What Jupyter shows for xlgraph's objects: an Ir or Graph draws itself (SVG through Graphviz)
or lists itself with a hint, a ProfileReport shows the report page's views, a Session its
device, replicas and memory."""

from __future__ import annotations

import html
import re
import shutil

import numpy as np
import pytest

import xlgraph as popxl
import xlgraph.ops as ops
from xlgraph.core import listing
from xlgraph.ipu.report_plot import format_bytes


def _ir(replication: int = 1) -> tuple[popxl.Ir, popxl.Graph]:
    ir = popxl.Ir(replication=replication)
    with ir.main_graph:
        w = popxl.variable(np.ones((3, 4), np.float32), name="w<b>&")
        double = ir.create_graph(lambda a: a + a, w)
        (y,) = ops.call(double, w)
        ops.host_store(popxl.d2h_stream(y.shape, y.dtype, "y"), y)
    return ir, double


@pytest.mark.skipif(shutil.which("dot") is None, reason="needs Graphviz (apt-get install graphviz)")
def test_ir_and_graph_draw_as_svg() -> None:
    ir, double = _ir()
    for program in (ir, ir.main_graph, double):
        bundle = program._repr_mimebundle_()
        assert set(bundle) == {"image/svg+xml", "text/plain"}
        assert bundle["text/plain"] == repr(program)
        svg = bundle["image/svg+xml"]
        assert svg.rstrip().endswith("</svg>") and "<svg" in svg
        labels = [html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", svg)]
        if program is not double:
            assert any(label.startswith("%w<b>&") for label in labels)  # user text as written
        assert "<b>" not in svg  # ... and escaped in the SVG
    assert "cluster" in ir._repr_mimebundle_()["image/svg+xml"]  # one box per graph


def test_without_graphviz_the_listing_and_a_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    ir, _ = _ir()
    monkeypatch.setattr(shutil, "which", lambda name: None)
    bundle = ir._repr_mimebundle_()
    assert bundle == {"text/plain": f"{ir}\n(no drawing: drawing this ir needs Graphviz's `dot` "
                                    "program, which is not on PATH (apt-get install graphviz))"}


def test_a_large_program_is_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    ir, _ = _ir()
    monkeypatch.setattr(listing, "DRAW_LIMIT", 1)
    assert len(ir.main_graph.ops) == 2  # call, host_store
    hint = ir.main_graph._repr_mimebundle_()["text/plain"].splitlines()[-1]
    assert hint == ("(no drawing: 2 ops are too many to draw inline; graph.to_dot('graph.svg') "
                    "draws them into a file)")


def test_a_failing_dot_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    fake = tmp_path / "dot"
    fake.write_text("#!/bin/sh\necho 'Format: \"svg\" not recognized.' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    ir, _ = _ir()
    hint = ir._repr_mimebundle_()["text/plain"].splitlines()[-1]
    assert hint == ("(no drawing: drawing this ir: Graphviz's `dot` failed: "
                    "Format: \"svg\" not recognized.)")


def test_report_shows_the_page_inline() -> None:
    pytest.importorskip("plotly")
    from xlgraph.ipu.page import page_text

    ir, _ = _ir()
    session = popxl.Session(ir, "ipu_model")
    report = session.report()
    shown = report._repr_html_()
    frame = re.fullmatch(r'<iframe srcdoc="([^"]*)" sandbox="allow-scripts" '
                         r'title="IPU model report" style="[^"]*"></iframe>', shown)
    assert frame, shown[:300]
    page = html.unescape(frame.group(1))
    assert page == page_text(report)  # the page itself, escaped as an attribute
    for view in ("view-tiles", "view-categories", "view-liveness", "view-operations",
                 "view-time"):
        assert f'id="{view}"' in page
    assert "w&lt;b&gt;&amp;" in page and "w<b>&" not in page  # the page escapes user text
    assert "<script" not in shown  # the notebook itself gets no script


def test_report_without_plotly_shows_its_text(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    ir, _ = _ir()
    report = popxl.Session(ir, "ipu_model").report()
    monkeypatch.setitem(sys.modules, "plotly", None)
    shown = report._repr_html_()
    assert shown == (f"<pre>{html.escape(str(report))}</pre><p><em>the report page needs "
                     "plotly, which is not installed: pip install &#x27;xlgraph[report]&#x27;: "
                     "the interactive views need it.</em></p>")


def test_session_shows_device_replicas_and_memory() -> None:
    ir, _ = _ir(replication=2)
    session = popxl.Session(ir, "ipu_model")
    report = session.report()
    rows = re.findall(r"<tr><th[^>]*>([^<]*)</th><td[^>]*>([^<]*)</td></tr>",
                      session._repr_html_())
    peak = report.peak
    fullest = int(np.argmax(peak))
    cap = report.model.memory_bytes_per_tile
    assert rows == [
        ("device", f"ipu_model: {report.model.describe()}"),
        ("replicas", "2"),
        ("attached", "no"),
        ("variables", f"1 tensor, {format_bytes(3 * 4 * 4)} per replica"),
        ("modelled memory", f"peak {format_bytes(peak.sum())} over {report.model.tiles:,} "
                            f"tiles; fullest tile {fullest}: {format_bytes(peak[fullest])} of "
                            f"{format_bytes(cap)} ({100 * peak[fullest] / cap:.1f}%)"),
    ]
    with popxl.Session(_ir()[0], "cpu") as cpu:
        rows = dict(re.findall(r"<tr><th[^>]*>([^<]*)</th><td[^>]*>([^<]*)</td></tr>",
                               cpu._repr_html_()))
    assert rows["device"] == "cpu" and rows["attached"] == "yes" and len(rows) == 4
