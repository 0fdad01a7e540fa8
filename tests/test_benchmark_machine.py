"""Every benchmark reports the machine it ran on (CPU flags included); ``cold_start.py`` times
its children with their modules' bytecode compiled, as an installed package has it."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import cold_start  # noqa: E402
import harness  # noqa: E402

SCRIPTS = sorted(p for p in BENCHMARKS.glob("*.py") if "__main__" in p.read_text())


def _calls_machine(tree: ast.AST) -> bool:
    return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
               and node.func.id == "machine" for node in ast.walk(tree))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_benchmark_script_prints_the_machine(script: Path) -> None:
    assert _calls_machine(ast.parse(script.read_text())), f"{script.name} never calls machine()"


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="reads Linux's /proc/cpuinfo")
def test_machine_reports_the_cpus_vector_flags() -> None:
    text = Path("/proc/cpuinfo").read_text()
    flags = next(line.split(":", 1)[1].split() for line in text.splitlines()
                 if line.startswith("flags"))
    info = harness.machine()
    assert info["cpu_flags"] == sorted(f for f in flags if f.startswith(harness.VECTOR_FLAGS))
    assert ("avx2" in info["cpu_flags"]) == ("avx2" in flags)
    assert all(not f.startswith("sse2") for f in info["cpu_flags"])  # only the listed families


@pytest.mark.parametrize("asked", ["openblas", "mkl"])
def test_machine_names_the_blas_of_xlgraphs_products(monkeypatch: pytest.MonkeyPatch,
                                                     asked: str) -> None:
    from xlgraph.ops import mkl

    if asked == "mkl" and mkl._library_path() is None:
        pytest.skip("needs the mkl extra")
    monkeypatch.setenv(mkl.ENV, asked)
    mkl.library.cache_clear()
    try:
        info = harness.machine()
    finally:
        mkl.library.cache_clear()
    assert info["xlgraph_blas"] == asked and info["XLGRAPH_BLAS"] == asked


_CHILD = """
import json, sys
sys.path.insert(0, {where!r})
import probe_module
print(json.dumps({{"value": probe_module.VALUE}}))
"""


def test_cold_start_children_find_their_bytecode_cached(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "probe_module.py").write_text("VALUE = 1\n")
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")  # as this repository's shells set it
    code = _CHILD.format(where=str(tmp_path / "src"))
    bytecode = tmp_path / "bytecode"
    assert cold_start.run_child(code, str(tmp_path / "numba"), str(bytecode)) == {"value": 1}
    written = list(bytecode.rglob("probe_module*.pyc"))
    assert len(written) == 1  # the untimed run filled the shared cache
    stamp = written[0].stat().st_mtime_ns
    cold_start.run_child(code, str(tmp_path / "numba"), str(bytecode))
    assert written[0].stat().st_mtime_ns == stamp  # read, not compiled again
    cold_start.run_child(code, str(tmp_path / "numba2"), None)
    assert not list((tmp_path / "src").rglob("*.pyc"))  # --no-bytecode writes none
