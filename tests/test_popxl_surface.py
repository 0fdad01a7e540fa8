"""Every public PopXL 3.3 name exists in xlgraph under its PopXL module path, with PopXL's kind,
parameter names, order and defaults (tests/data/popxl_surface.json); the rows that cannot match
are the ones docs/popxl-surface.md lists, and that page is current."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from doc_generators import load_generator

import xlgraph as popxl
from xlgraph import ops
from xlgraph.transforms import autodiff

ROOT = Path(__file__).resolve().parent.parent


GEN = load_generator("generate_popxl_surface")
TABLE = GEN.load_table()


@pytest.fixture(scope="module")
def samples() -> dict[str, Any]:
    """One instance of each PopXL class, so attributes an instance holds count as properties."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((2, 3), np.float32), name="x")
        graph = ir.create_graph(lambda t: ops.sin(t), x)
        info = ops.call_with_info(graph, x)
        grad = autodiff(graph)
        buffer = popxl.remote_buffer((2,), popxl.float32, 1)
    return {
        "popxl.dtype": popxl.float32,
        "popxl.Graph": ir.main_graph,
        "popxl.Ir": ir,
        "popxl.Tensor": x,
        "popxl.RemoteBuffer": buffer,
        "popxl.ReplicaGrouping": ir.replica_grouping(),
        "popxl.Session": popxl.Session(ir),
        "popxl.TensorLocation": popxl.TensorLocation(),
        "popxl.tensorlocation.TensorLocation": popxl.TensorLocation(),
        "popxl.ops.CallSiteInfo": info,
        "popxl.transforms.GradGraphInfo": grad,
        "popxl.transforms.ExpectedConnection": grad.expected_inputs[0],
    }


@pytest.mark.parametrize("path", sorted(TABLE))
def test_popxl_name_matches(path: str, samples: dict[str, Any]) -> None:
    diffs = GEN.check(path, TABLE[path], samples)
    listed = [d for d in diffs if d.split(":", 1)[0] in GEN.DEVIATIONS]
    unlisted = [d for d in diffs if d not in listed]
    assert not unlisted, "\n".join(unlisted)
    stale = [p for p in GEN.DEVIATIONS if p.startswith(path + ".") or p == path]
    matched = [p for p in stale if not any(d.startswith(p + ":") for d in listed)]
    assert not matched, f"these rows now match PopXL; remove them from DEVIATIONS: {matched}"


def test_deviations_name_rows_of_the_table() -> None:
    for path in GEN.DEVIATIONS:
        owner, _, member = path.rpartition(".")
        assert path in TABLE or member in TABLE.get(owner, {}).get("members", {}), path


def test_the_check_catches_a_changed_signature() -> None:
    row = {"kind": "function", "params": ["t", "axis=0"]}
    assert GEN.check_params(lambda t, axis=1: t, row["params"], False)
    assert GEN.check_params(lambda axis, t=0: t, row["params"], False)
    assert GEN.check_params(lambda t, extra, axis=0: t, row["params"], False)
    assert not GEN.check_params(lambda t, axis=0, *, extra=1: t, row["params"], False)


def test_surface_page_is_up_to_date() -> None:
    assert (ROOT / "docs" / "popxl-surface.md").read_text() == GEN.render(), (
        "docs/popxl-surface.md is out of date; run `python docs/generate_popxl_surface.py`")
