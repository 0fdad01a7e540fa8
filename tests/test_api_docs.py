"""docs/api.md is generated from the library's docstrings, complete and current."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest
from doc_generators import load_generator

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def gen():
    pytest.importorskip("torch")  # xlgraph.poptorch is documented too; CI installs torch
    return load_generator("generate_api")


def test_api_md_is_up_to_date(gen) -> None:
    assert (ROOT / "docs" / "api.md").read_text() == gen.render(), (
        "docs/api.md is out of date; run `python docs/generate_api.py`")


def test_check_mode_fails_on_a_stale_file(gen, tmp_path: Path, monkeypatch) -> None:
    stale = tmp_path / "api.md"
    stale.write_text(gen.render().replace("## `xlgraph.nn`", "## nn"))
    monkeypatch.setattr(gen, "OUTPUT", stale)
    assert gen.main(["--check"]) == 1
    assert gen.main([]) == 0 and gen.main(["--check"]) == 0


def test_the_library_modules_are_documented(gen) -> None:
    required = {"xlgraph", "xlgraph.errors", "xlgraph.ipu", "xlgraph.dist", "xlgraph.dist.run",
                "xlgraph.nn", "xlgraph.optim", "xlgraph.data", "xlgraph.datasets",
                "xlgraph.checkpoint", "xlgraph.training", "xlgraph.vision.datasets",
                "xlgraph.vision.transforms", "xlgraph.vision.metrics", "xlgraph.poptorch",
                "xlgraph.poptorch.optim", "xlgraph.progress"}
    assert required <= set(gen.MODULES)
    text = gen.render()
    for name in gen.MODULES:
        assert f"## `{name}`" in text


def test_every_public_module_is_in_the_reference_or_placed_elsewhere(gen) -> None:
    import xlgraph

    modules = {f"xlgraph.{n}" for n in xlgraph.__all__
               if type(getattr(xlgraph, n)).__name__ == "module"}
    modules |= {"xlgraph.dist", "xlgraph.vision", "xlgraph.poptorch", "xlgraph.progress"}
    documented = set(gen.MODULES) | set(gen.ELSEWHERE)
    missing = {m for m in modules if m not in documented
               and not any(d.startswith(f"{m}.") for d in documented)}
    assert not missing, f"add {sorted(missing)} to MODULES (or ELSEWHERE) in docs/generate_api.py"


def test_session_and_core_classes_list_every_argument(gen) -> None:
    import inspect

    import xlgraph

    text = gen.render()
    for cls in (xlgraph.Ir, xlgraph.Session, xlgraph.IPUModel, xlgraph.data.DataLoader):
        entry = text.split(f"- `{cls.__name__}(", 1)[1].split("\n- ", 1)[0]
        for name in inspect.signature(cls).parameters:
            assert f"  - argument `{name}`: " in entry, f"{cls.__name__}({name}=...) undocumented"


def test_every_public_name_has_an_entry_with_a_purpose(gen) -> None:
    text = gen.render()
    for module_name in gen.MODULES:
        module = importlib.import_module(module_name)
        section = text.split(f"## `{module_name}`", 1)[1].split("\n## ", 1)[0]
        names = gen.public_names(module)
        assert names, module_name
        for name in names:
            assert re.search(rf"^- `{re.escape(name)}[`( =]", section, re.M), \
                f"{module_name}.{name} is missing"
    assert gen.NO_DOC not in text, "a public name has no docstring or comment"


def test_entries_show_signatures_defaults_and_keyword_only_markers(gen) -> None:
    text = gen.render()
    assert "- `Linear(in_features, out_features, bias=True)` (class, subclass of `Layer`): " in text
    assert "build_train_step(ir, forward, loss, optimizer, inputs, targets=(), *, params=None" \
        in text
    assert "checksums=MNIST_SHA256)" in text  # a constant default by its name
    assert "  - `.run(session, *arrays)`: Train on one group of batches" in text
    assert "- `MNIST_MEAN = 0.1307`: mean of the [0, 1]-scaled MNIST training pixels" in text


def test_first_sentence_does_not_stop_at_abbreviations_or_inside_parentheses() -> None:
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        from generate_ops import first_sentence
    finally:
        sys.path.remove(str(ROOT / "docs"))
    assert first_sentence("Drop (e.g. whole channels). More.") == "Drop (e.g. whole channels)."
    assert first_sentence("Cut here, i.e. now. Rest") == "Cut here, i.e. now."
    assert first_sentence("No full stop") == "No full stop"
    assert first_sentence("One (a. b) two.\n\nNext paragraph.") == "One (a. b) two."
    ops_md = (ROOT / "docs" / "ops.md").read_text()
    assert "broadcast over ``t`` (e.g. whole channels at once); survivors are scaled" in ops_md
    assert not re.search(r"\b(e\.g|i\.e)\.$", ops_md, re.M)
