"""docs/ops.md is generated from the registry, complete and current; every op is testable."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from doc_generators import load_generator

from xlgraph.op import BUILDERS, REGISTRY

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "docs" / "generate_ops.py"
ENTRY = re.compile(r"^- `([\w.]+)\(", re.M)
ALIAS = re.compile(r"alias: `([\w.]+)`")


def _generator():
    return load_generator("generate_ops")


def test_ops_md_is_up_to_date() -> None:
    assert (ROOT / "docs" / "ops.md").read_text() == _generator().render(), (
        "docs/ops.md is out of date; run `python docs/generate_ops.py`")


def test_check_mode_fails_on_a_stale_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gen = _generator()
    stale = tmp_path / "ops.md"
    stale.write_text(gen.render().replace("## Internal ops", "## Internal"))
    monkeypatch.setattr(gen, "OUTPUT", stale)
    assert gen.main(["--check"]) == 1
    assert gen.main([]) == 0 and gen.main(["--check"]) == 0


def test_check_mode_runs_as_a_script() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True,
                          text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_every_registered_op_and_public_builder_has_an_entry() -> None:
    gen = _generator()
    text = gen.render()
    documented = {name.split(".")[-1] for name in ENTRY.findall(text) + ALIAS.findall(text)}
    missing = sorted(n for n in REGISTRY
                     if n not in documented and BUILDERS[n].__name__ not in documented)
    assert missing == []
    public = {path.split(".")[-1] for path in gen._all_builders()}
    assert sorted(public - documented) == []


def test_internal_helpers_are_listed_apart_from_public_ops() -> None:
    text = _generator().render()
    internal = text.split("## Internal ops", 1)[1].split("## PopXL ops", 1)[0]
    assert "`gelu_grad(" in internal and "`ops.gelu(" not in internal
    assert "`gelu_grad(" not in text.split("## Internal ops", 1)[0]


def test_xlgraph_extras_are_marked() -> None:
    text = _generator().render()
    for name in ("sigmoid", "log_softmax"):
        line = text.split(f"`ops.{name}(", 1)[1].split("\n- ", 1)[0]
        assert "xlgraph extra" in line
    assert "xlgraph extra" not in text.split("`ops.softmax(", 1)[1].split("\n- ", 1)[0]


@pytest.mark.parametrize("name", sorted(n for n, d in REGISTRY.items() if d.kind == "kernel"))
def test_every_kernel_op_has_samples_and_differentiable_ones_a_gradient_sample(name: str) -> None:
    defn = REGISTRY[name]
    samples = defn.samples(np.random.default_rng(0)) if defn.samples else []
    assert samples, f"{name} has no samples, so the registry tests cannot check it"
    if defn.differentiable:
        assert any(s.grad for s in samples), f"{name} has a gradient but no gradient sample"
