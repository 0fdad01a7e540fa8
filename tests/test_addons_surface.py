"""Every popxl-addons public name (tests/data/popxl_addons_surface.json) exists in
xlgraph.addons under its module path with popxl-addons' kind, parameters and bases, or is
listed with its reason on docs/addons-support.md, and that page is current."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from doc_generators import load_generator

ROOT = Path(__file__).resolve().parent.parent


GEN = load_generator("generate_addons_support")
ROWS = GEN.load_table()


@pytest.mark.parametrize("row", ROWS, ids=[GEN.row_id(r) for r in ROWS])
def test_addons_row_matches(row: dict[str, Any]) -> None:
    diffs = GEN.check(row)
    rid = GEN.row_id(row)
    if rid in GEN.DEVIATIONS:
        assert diffs, f"{rid} now matches; remove it from DEVIATIONS"
    else:
        assert not diffs, "\n".join(diffs)


def test_notes_and_deviations_name_rows() -> None:
    ids = {GEN.row_id(r) for r in ROWS}
    assert set(GEN.DEVIATIONS) <= ids and set(GEN.NOTES) <= ids


def test_the_check_catches_differences() -> None:
    row = {"section": "popxl_addons.graph_cache", "kind": "function", "name": "tensor_hash",
           "params": "x"}
    assert GEN.check(row)  # parameter named t, not x
    row = {"section": "popxl_addons.dot_tree", "kind": "classmethod", "owner": "DotTree",
           "name": "get", "params": "key"}
    assert GEN.check(row) == ["popxl_addons.dot_tree.DotTree.get: not a classmethod"]
    row = {"section": "popxl_addons.rts", "kind": "function", "name": "no_such", "params": ""}
    assert GEN.check(row)


def test_support_page_is_current() -> None:
    assert GEN.main(["--check"]) == 0, "run python docs/generate_addons_support.py"


def test_popxl_addons_alias_is_opt_in_and_resolves_submodules() -> None:
    import importlib
    import sys

    from xlgraph import popxl_compat

    assert "popxl_addons" not in sys.modules
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("popxl_addons")
    popxl_compat.install()
    try:
        import xlgraph.addons
        import xlgraph.addons.transforms.batch_serialisation as real

        assert importlib.import_module("popxl_addons") is xlgraph.addons
        alias = importlib.import_module("popxl_addons.transforms.batch_serialisation")
        assert alias is real
        layers = importlib.import_module("popxl_addons.layers")
        assert layers.Linear is xlgraph.addons.layers.Linear
    finally:
        popxl_compat.uninstall()
    assert "popxl_addons" not in sys.modules
