"""Hostile and malformed profile files (issue 43: R1, R9, R10, R15, R16).

A profile is a shared file: whoever opens its page must run nothing its author wrote, and a
file that is not a profile ``report.save`` wrote must be refused by ``ProfileReport.load`` with
one ``ProfileFormatError`` naming the file and the field, never load and then crash the page
writer. Hypothesis generates hostile text in every string of a profile and malformed values at
every field (derandomised, a fixed budget: well under 30 s together); the page is parsed and
must hold only the page's own tags and attributes. tests/test_report_browser.py opens a hostile
page in Chromium.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import os
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import xlgraph as popxl
from xlgraph import ops
from xlgraph.errors import ArgumentError, ProfileFormatError
from xlgraph.ipu import ProfileReport

pytest.importorskip("plotly")
from xlgraph.ipu.page import write_compare, write_report  # noqa: E402
from xlgraph.ipu.page.cli import main  # noqa: E402

EVIL = "<img src=x onerror=alert(1)>"
PAYLOADS = (EVIL, "</script><script>alert(2)</script>", "\"'><svg onload=alert(3)>",
            "<a href=\"javascript:alert(4)\">x</a>", "\u2028\u2029<!--", "&lt;b&gt;&amp;",
            "{{7*7}}${alert(5)}", "<b>bold</b><br>")
SETTINGS = settings(max_examples=int(os.environ.get("XL_PROFILE_EXAMPLES", 30)),
                    derandomize=True, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@functools.cache
def _profile() -> str:
    """A small profile (4 tiles, a loop and a call) as JSON text."""
    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream((4,), popxl.float32, "x")
        w = popxl.variable(np.ones(4, np.float32), name="w")
        ys = popxl.d2h_stream((4,), popxl.float32, "y")
        g = ir.create_graph(lambda t: t * 2.0 + 1.0, w.spec)
        y = ops.call(g, ops.host_load(xs) * w)[0]
        ops.host_store(ys, ops.repeat(g, 2, y)[0])
    session = popxl.Session(ir, "ipu_model")
    with session:
        session.run({xs: np.ones(4, np.float32)})
    return session.report().to_json()


def _data() -> dict[str, Any]:
    return json.loads(_profile())


def _load(tmp_path: Path, data: Any, name: str = "p.json") -> ProfileReport:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return ProfileReport.load(path)


class _Markup(HTMLParser):
    """The tags and attribute names of a page (script and style bodies are not markup)."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attrs: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attrs.update(name for name, _ in attrs)
        self.links += [v or "" for name, v in attrs if name in ("href", "src", "action")]


def _markup(page: str) -> _Markup:
    parser = _Markup()
    parser.feed(page)
    parser.close()
    return parser


def _pages(report: ProfileReport, where: Path) -> list[str]:
    """The report page and the compare page of ``report`` (without plotly.js, which is the
    same in every page and is not markup)."""
    with mock.patch("plotly.offline.get_plotlyjs", lambda: ""):
        write_report(report, where / "r.html")
        write_compare(report, report, where / "d.html", (EVIL, PAYLOADS[1]))
    return [(where / name).read_text(encoding="utf-8") for name in ("r.html", "d.html")]


@functools.cache
def _benign_markup() -> tuple[frozenset[str], frozenset[str]]:
    import tempfile

    with tempfile.TemporaryDirectory() as where:
        report = _load(Path(where), _profile())
        parsed = [_markup(page) for page in _pages(report, Path(where))]
    return (frozenset().union(*(p.tags for p in parsed)),
            frozenset().union(*(p.attrs for p in parsed)))


def _assert_inert(pages: list[str]) -> None:
    tags, attrs = _benign_markup()
    for page in pages:
        parsed = _markup(page)
        assert parsed.tags <= tags, parsed.tags - tags
        assert parsed.attrs <= attrs, parsed.attrs - attrs
        assert not any(name.startswith("on") for name in parsed.attrs)
        assert all(link.startswith("#") for link in parsed.links), parsed.links
        for payload in PAYLOADS[:4]:
            assert payload not in page


# -- R1: nothing from a profile is markup ---------------------------------------------------------
def test_steps_per_run_cannot_put_markup_in_the_page(tmp_path):
    data = _data()
    data["time"]["steps_per_run"] = EVIL
    with pytest.raises(ProfileFormatError, match=r"p\.json.*'time\.steps_per_run' must be a "
                                                 r"whole number"):
        _load(tmp_path, data)
    report = _load(tmp_path, _data())
    report.steps_per_run = EVIL  # a report made in code: the page escapes it all the same
    page = write_report(report, tmp_path / "r.html").read_text(encoding="utf-8")
    _assert_inert([page])
    assert "(&lt;img src=x onerror=alert(1)&gt; steps)" in page


def _hostile(data: Any, draw: Any, path: tuple[str, ...] = ()) -> Any:
    """``data`` with every user string (names, op kinds, lines, specs, categories) drawn."""
    if isinstance(data, dict):
        out = {}
        for key, value in data.items():
            if path[:1] in (("schema",), ("version",), ("model",), ("note",)) or path == () and \
                    key in ("schema", "version", "model", "note", "tile_sets"):
                out[key] = value
            elif path == ("memory", "always_live"):
                out[draw(_TEXT)] = value
            else:
                out[key] = _hostile(value, draw, (*path, key))
        return out
    if isinstance(data, list):
        return [_hostile(v, draw, path) for v in data]
    return draw(_TEXT) if isinstance(data, str) else data


_TEXT = st.one_of(st.sampled_from(PAYLOADS),
                  st.text(st.sampled_from("<>\"'&/=;:() \\\u2028\x00abcxyz"), max_size=24),
                  st.text(max_size=12))


@SETTINGS
@given(st.data())
def test_hostile_text_anywhere_in_a_profile_stays_text(tmp_path_factory, data):
    hostile = _hostile(_data(), data.draw)
    where = tmp_path_factory.mktemp("hostile")
    report = _load(where, hostile)
    assert [r.name for r in report.cycles.rows] == [r["name"] for r in hostile["operations"]]
    _assert_inert(_pages(report, where))


# -- R9, R10: a malformed file is one ProfileFormatError naming the file and the field ----------
_V0 = {"tiles": [], "ops": [], "estimated_cycles_per_run": 1}
_TILE = {"always_live": {"code": 1}, "not_always_live_peak": 0}


def _set(path: str, value: Any):
    def change(data: dict[str, Any]) -> dict[str, Any]:
        *inner, last = path.split("/")
        node = data
        for key in inner:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[int(last) if isinstance(node, list) else last] = value
        return data
    return change


@pytest.mark.parametrize("change, field", [
    # R9: bare AttributeError, KeyError, TypeError before
    (_set("operations", [1]), "operations[0]"),
    (_set("model", []), "model"),
    (_set("memory/always_live", []), "memory.always_live"),
    (lambda d: {**_V0}, "model"),  # version 0
    (lambda d: {**_V0, "model": {}, "tiles": [1, 1, 1, 1]}, "tiles[0]"),
    (lambda d: {**_V0, "model": {}, "tiles": [_TILE] * 4}, "liveness"),
    # R10: loaded, then a traceback from the page writer
    (_set("time/steps_per_run", "abc"), "time.steps_per_run"),
    (_set("time/host_side_seconds_per_run", "x"), "time.host_side_seconds_per_run"),
    (_set("time/device_cycles_per_run", "5"), "time.device_cycles_per_run"),
    (_set("operations/0/cycles", "x"), "operations[0].cycles"),
    (_set("operations/0/positions", ["a"]), "operations[0].positions[0]"),
    (_set("liveness/steps/0/bytes", "x"), "liveness.steps[0].bytes"),
    (_set("memory/always_live/code", [1]), "memory.always_live.code"),
    (_set("memory/not_always_live_peak", []), "memory.not_always_live_peak"),
    (_set("model/tiles_per_ipu", 10 ** 7), "model.tiles"),
    (_set("liveness/peak/tensors", [{}]), "liveness.peak.tensors[0].name"),
    (_set("memory/always_live_tensors/0/bytes", "x"), "memory.always_live_tensors[0].bytes"),
    (_set("tile_sets/io", [3, 9]), "tile_sets.io[1]"),
    (_set("time/device_cycles_per_run", math.nan), "time.device_cycles_per_run"),
    (_set("liveness/steps/1/position", 7), "liveness.steps[1].position"),
])
def test_a_malformed_profile_is_one_error_naming_the_file_and_field(tmp_path, capsys, change,
                                                                    field):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(change(_data())))
    with pytest.raises(ProfileFormatError) as info:
        ProfileReport.load(path)
    assert str(path) in str(info.value) and f"field '{field}'" in str(info.value)
    assert main([str(path), "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert err == f"xlgraph-report: {info.value}\n" and not (tmp_path / "r.html").exists()


def test_deep_nesting_and_a_boolean_version_are_refused(tmp_path):
    with pytest.raises(ProfileFormatError, match=r"deep\.json.*nests too deeply"):
        _load(tmp_path, "[" * 100_000 + "]" * 100_000, "deep.json")
    data = _data()
    data["version"] = True
    with pytest.raises(ProfileFormatError, match="schema version True, which this xlgraph "
                                                 "does not read"):
        _load(tmp_path, data)


_LEAF = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
_JSON = _LEAF | st.lists(_LEAF, max_size=3) | st.dictionaries(st.text(max_size=8), _LEAF,
                                                               max_size=3)


def _like(value: Any) -> st.SearchStrategy[Any]:
    """Values of ``value``'s JSON type (out of range, of another length...)."""
    if isinstance(value, bool):
        return st.booleans()
    if isinstance(value, int):
        return st.integers(0, 64) | st.integers(-3, 2 ** 41) | st.sampled_from([2 ** 40, 2 ** 63])
    if isinstance(value, float):
        return st.floats(0, 1e6) | st.floats()
    if isinstance(value, str):
        return _TEXT
    if isinstance(value, list):
        return st.lists(st.sampled_from(copy.deepcopy(value)), max_size=len(value) + 1).map(
            copy.deepcopy) if value else st.just([])
    return _JSON


def _paths(data: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every field of ``data`` by its keys and indices."""
    items = (data.items() if isinstance(data, dict) else enumerate(data)
             if isinstance(data, list) else ())
    out = [path] if path else []
    for key, value in items:
        out += _paths(value, (*path, key))
    return out


@SETTINGS
@given(st.data())
def test_a_malformed_profile_is_refused_or_renders(tmp_path_factory, data):
    doc = _data()
    paths = _paths(doc)
    for _ in range(data.draw(st.integers(1, 2))):
        *inner, last = data.draw(st.sampled_from(paths))
        node = doc
        try:
            for key in inner:
                node = node[key]
            if isinstance(node, dict) and data.draw(st.integers(0, 3)) == 0:
                node.pop(last, None)
            else:
                node[last] = data.draw(st.one_of(_like(node[last]), _like(node[last]), _JSON))
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change replaced this field's parent
    where = tmp_path_factory.mktemp("malformed")
    try:
        report = _load(where, doc)
    except ProfileFormatError as exc:
        assert str(where / "p.json") in str(exc) and "\n" not in str(exc)
        return
    _assert_inert(_pages(report, where))


# -- R15: the page never replaces its profile -----------------------------------------------------
def test_the_command_refuses_to_write_the_page_over_a_profile(tmp_path, capsys, monkeypatch):
    profile = tmp_path / "p.json"
    profile.write_text(_profile())
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    for argv in (["../p.json", "-o", str(profile)], [str(profile), "-o", "../sub/../p.json"],
                 [str(profile), "../p.json", "-o", "../p.json"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "would replace the profile" in err
        assert profile.read_text() == _profile()
    (tmp_path / "report.html").write_text(_profile())  # the default output is a profile
    monkeypatch.chdir(tmp_path)
    assert main(["report.html"]) == 2 and "is the profile" in capsys.readouterr().err


def test_to_html_from_code_keeps_a_profile_it_would_replace(tmp_path):
    profile = tmp_path / "p.json"
    profile.write_text(_profile())
    report = ProfileReport.load(profile)
    with pytest.raises(FileExistsError, match=r"p\.json holds a JSON document"):
        report.to_html(profile)
    assert profile.read_text() == _profile()
    page = report.to_html(tmp_path / "page.html")  # a page over a page is fine
    assert report.to_html(page) == page and page.read_text().lstrip().startswith("<!DOCTYPE")


def test_a_profile_of_zero_cycles_prints_and_renders(tmp_path):
    data = _data()
    data["time"].update(cycles_per_run=0, device_cycles_per_run=0, host_cycles_per_run=0,
                        seconds_per_run=0.0)
    report = _load(tmp_path, data)
    assert report.estimated_seconds_per_run == 0
    assert "no steps/s (zero cycles)" in str(report)
    assert "IPU model report" in report.to_html(tmp_path / "zero.html").read_text()


# -- R16: a bad autoReport directory names autoReport ---------------------------------------------
def _tiny_ir() -> popxl.Ir:
    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream((4,), popxl.float32, "x")
        ops.host_store(popxl.d2h_stream((4,), popxl.float32, "y"), ops.host_load(xs) + 1.0)
    return ir


def test_an_auto_report_directory_that_cannot_hold_the_profile(tmp_path, monkeypatch):
    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    (tmp_path / "dir" / "profile.json").mkdir(parents=True)
    for directory, reason in ((afile, "File exists"), (tmp_path / "dir", "Is a directory")):
        monkeypatch.setenv("POPLAR_ENGINE_OPTIONS", json.dumps(
            {"autoReport.all": "true", "autoReport.directory": str(directory)}))
        with pytest.raises(ArgumentError) as info:
            popxl.Session(_tiny_ir(), "ipu_model")
        message = str(info.value)
        assert f"autoReport.directory '{directory}'" in message and reason in message
        assert "POPLAR_ENGINE_OPTIONS" in message and "test_report_hostile.py:" in message
    assert afile.read_text() == "not a directory"
