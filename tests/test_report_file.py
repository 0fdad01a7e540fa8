"""The profile file (``report.save``/``ProfileReport.load``, its versions), where PopXL's
``autoReport`` options and PopTorch's ``enableProfiling`` write it, ``xlgraph-report`` and the
page's HTML without a browser (tests/test_report_browser.py opens it in one)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops
from xlgraph.errors import ArgumentError, ProfileFormatError
from xlgraph.ipu import IPUModel, ProfileReport
from xlgraph.ipu.profile_file import VERSION

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from models import build_mlp  # noqa: E402


def _session(batch: int = 8, model: IPUModel | None = None, loop: int = 1) -> popxl.Session:
    return popxl.Session(build_mlp(batch, loop=loop).ir, "ipu_model", ipu_model=model)


@pytest.fixture(scope="module")
def report() -> ProfileReport:
    return _session().report()


def test_save_and_load_give_back_every_fact(report, tmp_path):
    path = report.save(tmp_path / "profile.json")
    data = json.loads(path.read_text())
    assert (data["schema"], data["version"]) == ("xlgraph-profile", VERSION)
    loaded = ProfileReport.load(path)
    assert loaded.memory is None and loaded.to_dict() == report.to_dict()
    assert str(loaded) == str(report)
    np.testing.assert_array_equal(loaded.peak, report.memory.peak)
    for name, values in report.memory.always_live.items():
        np.testing.assert_array_equal(loaded.always_live[name], values)
    assert [s["bytes"] for s in loaded.liveness()] == report.memory.curve.sum(axis=1)[1:].tolist()
    assert [r.to_json() for r in loaded.cycles.rows] == [r.to_json() for r in report.cycles.rows]
    assert loaded.cycles.total == report.cycles.total


def test_the_peak_and_its_tensors_come_from_the_live_ranges(report):
    memory = report.memory
    totals = memory.curve.sum(axis=1)
    position = report.peak_position
    assert totals[position] == totals[1:].max()
    live = [size for start, end, size, *_ in memory.live_roots if start <= position <= end]
    assert sorted((t["bytes"] for t in report.peak_tensors), reverse=True) == sorted(
        (s for s in live if s), reverse=True)
    assert sum(t["bytes"] for t in report.peak_tensors) == totals[position]
    variables = {t["name"] for t in report.always_live_tensors}
    assert {"W0", "b0", "W1", "b1"} <= variables


def test_each_operation_points_at_the_steps_that_run_it(report):
    steps = {s["position"]: s for s in report.liveness()}
    kernels = [r for r in report.cycles.rows if r.executions]
    assert kernels and all(r.positions for r in kernels)
    for row in kernels:
        for p in row.positions:  # main-graph ops at their own step, others at their call
            step = steps[p]
            assert step["step"] == row.name or step["kind"] == "func" or "/" in row.name


def test_an_op_inside_a_loop_has_its_step_inside_the_loop():
    report = _session(loop=3).report()
    matmuls = [r for r in report.cycles.rows if r.op == "matmul"]
    loop_steps = [s["position"] for s in report.liveness() if s["kind"] == "loop"]
    assert matmuls and loop_steps
    assert all(p > loop_steps[0] for r in matmuls for p in r.positions)


def _version_0(report: ProfileReport) -> dict:
    """What ``to_json`` wrote before the file had a version."""
    return {
        "note": "x", "model": {"ipu_version": "ipu2", "num_ipus": 1, "tiles_per_ipu": 4},
        "tiles": report.tiles(),
        "liveness": [{k: s[k] for k in ("position", "step", "bytes", "max_tile_bytes")}
                     for s in report.liveness()],
        "ops": [{k: v for k, v in r.to_json().items() if k != "positions"}
                for r in report.cycles.rows],
        "estimated_cycles_per_run": report.cycles.total,
        "estimated_device_cycles_per_run": report.cycles.device_cycles,
        "estimated_host_cycles_per_run": report.cycles.host_cycles,
        "estimated_seconds_per_run": report.estimated_seconds_per_run,
        "steps_per_run": 1, "measured_host_side_seconds_per_run": 0.002,
    }


def test_version_0_files_are_read(report, tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps(_version_0(report)))
    old = ProfileReport.load(path)
    np.testing.assert_array_equal(old.peak, report.peak)
    assert old.cycles.total == report.cycles.total
    assert [r.name for r in old.cycles.rows] == [r.name for r in report.cycles.rows]
    assert old.peak_position == report.peak_position and old.host_side_s_per_run == 0.002
    assert old.peak_tensors == []  # version 0 did not record them


@pytest.mark.parametrize("content, words", [
    ({"schema": "xlgraph-profile", "version": 2}, ["version 2", "newer xlgraph"]),
    ({"schema": "xlgraph-profile", "version": "1"}, ["version '1'", "reads versions 0, 1"]),
    ({"schema": "popvision", "version": 1}, ["'popvision'", "not an xlgraph profile"]),
    ([1, 2], ["expected a JSON object, got list"]),
    ({"schema": "xlgraph-profile", "version": 1, "model": {}}, ["field 'tile_sets' is missing"]),
])
def test_unreadable_files_are_refused_by_name(tmp_path, content, words):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(content))
    with pytest.raises(ProfileFormatError) as info:
        ProfileReport.load(path)
    assert str(path) in str(info.value)
    for word in words:
        assert word in str(info.value)


def test_a_binary_file_is_refused(tmp_path):
    path = tmp_path / "profile.pop"
    path.write_bytes(b"\x89\x00\xff binary")
    with pytest.raises(ProfileFormatError, match="not JSON.*profile.pop files are not read"):
        ProfileReport.load(path)


def _two_runs(session: popxl.Session, batch: int = 8) -> None:
    streams = {s.name: s for s in session.expected_inputs()}
    feed = {streams["image"]: np.zeros((batch, 28, 28), np.float32),
            streams["labels"]: np.zeros(batch, np.int32)}
    with session:
        session.run(feed)
        session.run(feed)


def test_poplar_auto_report_writes_the_profile_where_popxl_users_look(tmp_path, monkeypatch):
    where = tmp_path / "profiles"
    monkeypatch.setenv("POPLAR_ENGINE_OPTIONS", json.dumps(
        {"autoReport.all": "true", "autoReport.directory": str(where)}))
    session = _session()
    saved = ProfileReport.load(where / "profile.json")
    assert saved.host_side_s_per_run is None and saved.cycles.total == session.report().cycles.total
    _two_runs(session)
    assert ProfileReport.load(where / "profile.json").host_side_s_per_run > 0  # at detach
    popxl.Session(build_mlp(8).ir, "cpu")  # models no IPU: writes nothing
    monkeypatch.setenv("POPLAR_ENGINE_OPTIONS", '{"autoReport.all": "false"}')
    (where / "profile.json").unlink()
    _session()
    assert not (where / "profile.json").exists()


def test_auto_report_from_the_session_options_and_a_bad_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("POPLAR_ENGINE_OPTIONS", raising=False)
    ir = build_mlp(8).ir
    ir.session_options.engineOptions.update(
        {"autoReport.outputGraphProfile": "true", "autoReport.directory": str(tmp_path)})
    popxl.Session(ir, "ipu_model")
    assert ProfileReport.load(tmp_path / "profile.json").model.tiles == 4
    monkeypatch.setenv("POPLAR_ENGINE_OPTIONS", "{autoReport.all: true}")
    with pytest.raises(ArgumentError, match="POPLAR_ENGINE_OPTIONS must be a JSON object.*not "
                                            "JSON"):
        _session()


# -- the page and the command ------------------------------------------------------------------
def test_import_xlgraph_and_a_report_never_import_plotly():
    code = ("import sys; sys.path.insert(0, 'benchmarks'); import xlgraph; "
            "from models import build_mlp; "
            "r = xlgraph.Session(build_mlp(8).ir, 'ipu_model').report(); r.to_dict(); "
            "assert 'plotly' not in sys.modules, 'plotly imported'")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_without_plotly_the_page_names_the_extra(report, tmp_path, monkeypatch, capsys):
    from xlgraph.ipu.page.cli import main

    monkeypatch.setitem(sys.modules, "plotly", None)
    with pytest.raises(ImportError) as info:
        report.to_html(tmp_path / "r.html")
    assert str(info.value).count("\n") == 0 and "xlgraph[report]" in str(info.value)
    report.save(tmp_path / "p.json")
    assert main([str(tmp_path / "p.json"), "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "xlgraph[report]" in err and not (tmp_path / "r.html").exists()


def test_the_command_refuses_a_bad_file_in_one_line(tmp_path, capsys):
    pytest.importorskip("plotly")
    from xlgraph.ipu.page.cli import main

    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "xlgraph-profile", "version": 9}')
    assert main([str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "version 9" in err
    good = tmp_path / "good.json"
    _session().report().save(good)
    assert main([str(good), "-o", str(tmp_path / "no" / "such" / "dir.html")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write the page" in err
    with pytest.raises(SystemExit):
        main([str(good)] * 3)  # one profile or two


def test_the_page_is_self_contained_and_shows_user_text_as_text(tmp_path):
    pytest.importorskip("plotly")
    from xlgraph.ipu.page.cli import main

    evil = "<img src=x onerror=alert(1)>"
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.ones((4, 4), np.float32), name=evil)
        ops.host_store(popxl.d2h_stream((4, 4), popxl.float32, "y"), w * 2.0)
    popxl.Session(ir, "ipu_model").report().save(tmp_path / "p.json")
    assert main([str(tmp_path / "p.json"), "-o", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert evil not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", page)  # nothing to fetch
    assert page.count("<script") >= 3 and "Plotly.newPlot" in page
    for view in ("view-tiles", "view-categories", "view-liveness", "view-operations",
                 "view-time"):
        assert f'id="{view}"' in page
    assert main([str(tmp_path / "p.json"), str(tmp_path / "p.json"),
                 "-o", str(tmp_path / "d.html")]) == 0
    assert 'id="diff-ops-table"' in (tmp_path / "d.html").read_text()


def test_compare_matches_operations_by_name():
    from xlgraph.ipu.page.compare import operation_diff

    small, large = _session(8).report(), _session(32).report()
    only = popxl.Ir()
    with only.main_graph:
        ops.host_store(popxl.d2h_stream((4,), popxl.float32, "y"),
                       ops.exp(popxl.variable(np.ones(4, np.float32))))
    other = popxl.Session(only, "ipu_model").report()
    diff = operation_diff(small, large)
    assert [abs(r["delta"]) for r in diff] == sorted((abs(r["delta"]) for r in diff),
                                                     reverse=True)
    rows = {r["name"]: r for r in diff}
    after = {r.name: r.cycles for r in large.cycles.rows}
    assert set(rows) == {r.name for r in small.cycles.rows} | set(after)
    for r in small.cycles.rows:
        assert (rows[r.name]["before"], rows[r.name]["after"]) == (r.cycles, after[r.name])
        assert rows[r.name]["delta"] == after[r.name] - r.cycles and rows[r.name]["in"] == "both"
    mixed = {r["name"]: r for r in operation_diff(small, other, ("a", "b"))}
    exp = next(r.name for r in other.cycles.rows if r.op == "exp")
    assert mixed[exp]["in"] == "b" and mixed[exp]["before"] == 0
    gelu = next(r for r in small.cycles.rows if r.op == "gelu")
    assert mixed[gelu.name]["in"] == "a" and mixed[gelu.name]["delta"] == -gelu.cycles
