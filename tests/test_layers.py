"""The package's layers import only downward, and no module imports itself through others.

Every ``import`` in ``xlgraph/`` counts, lazy ones inside functions and ``TYPE_CHECKING`` ones
included: a module that names another only for a type hint still depends on it to be read. The
table below is the picture at the top of docs/architecture.md.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "xlgraph"

# Layers, lowest first: a module may import its own layer and the ones before it. A module is
# placed by the longest prefix of its dotted name listed here.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("core", (
        "xlgraph.core", "xlgraph.dtypes", "xlgraph.errors", "xlgraph.utils", "xlgraph.fp8_utils",
        "xlgraph.context", "xlgraph.tensor", "xlgraph.graph", "xlgraph.op", "xlgraph.ir",
        "xlgraph.listing", "xlgraph.streams", "xlgraph.typing_", "xlgraph.module",
        "xlgraph.options", "xlgraph.replica_grouping", "xlgraph.tensorlocation",
        "xlgraph.random_seed", "xlgraph.layout", "xlgraph.progress",
    )),
    ("ops", ("xlgraph.ops", "xlgraph.cost", "xlgraph.remote", "xlgraph.remote_buffer")),
    ("transforms", ("xlgraph.transforms",)),
    ("lower", ("xlgraph.lower",)),
    ("devices", ("xlgraph.ipu",)),
    ("runtime", ("xlgraph.runtime", "xlgraph.session", "xlgraph.testing",
                 "xlgraph.dist.exchange", "xlgraph.dist.shared")),
    ("library", ("xlgraph.nn", "xlgraph.optim", "xlgraph.training", "xlgraph.checkpoint",
                 "xlgraph.data", "xlgraph.datasets")),
    ("api", ("xlgraph",)),
    ("frontends", ("xlgraph.poptorch", "xlgraph.popxl_compat", "xlgraph.popart_compat",
                   "xlgraph.compat_pool", "xlgraph.shims", "xlgraph.notebook",
                   "xlgraph.dist", "xlgraph.addons", "xlgraph.vision")),
]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> int:
    best, rank = -1, None
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), i
    assert rank is not None, f"{module} is in no layer: add it to LAYERS"
    return rank


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.AST, typing_only: bool = False) -> Iterator[tuple[ast.AST, bool]]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, typing_only
        inner = typing_only or (isinstance(node, ast.If) and _is_type_checking(node))
        yield from _import_nodes(node, inner)


def _resolve(name: str) -> str | None:
    """The xlgraph module ``name`` names, or its closest enclosing module."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(module: str) -> Iterator[tuple[str, int, bool]]:
    """``(imported module, line, only under TYPE_CHECKING)`` for each xlgraph import."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node, typing_only in _import_nodes(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                       for a in node.names]
        for target in targets:
            found = _resolve(target) if target.split(".")[0] == "xlgraph" else None
            if found and found != module:
                yield found, node.lineno, typing_only


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        layer_of(module)


def test_imports_point_down_the_layers() -> None:
    upward = [
        f"{MODULES[m].relative_to(ROOT)}:{line}: {m} ({LAYERS[layer_of(m)][0]}) imports "
        f"{target} ({LAYERS[layer_of(target)][0]})"
        for m in MODULES for target, line, _ in imports(m) if layer_of(target) > layer_of(m)
    ]
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _without_reexports(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """``edges`` less each module's imports of a package it lies in (``from xlgraph.ops import
    add`` inside ``xlgraph/ops/``): that package's ``__init__`` re-exports the module, the one
    loop allowed. A package's ``__init__`` still depends on what it re-exports, so a module
    outside the package that imports the package and is imported back by one of its modules is
    a cycle."""
    return {m: {t for t in targets
                if not (MODULES.get(t, Path()).name == "__init__.py" and m.startswith(f"{t}."))}
            for m, targets in edges.items()}


def import_edges() -> dict[str, set[str]]:
    """Each module's xlgraph imports: plain, lazy and ``TYPE_CHECKING`` ones alike."""
    return {m: {t for t, _, _ in imports(m)} for m in MODULES}


def test_no_import_cycle() -> None:
    """Imports form no cycle, inside a package or across packages, type-only ones included;
    the one allowed loop is a module importing its own package, whose ``__init__`` re-exports
    it."""
    cycles = _cycles(_without_reexports(import_edges()))
    assert not cycles, "import cycles:\n" + "\n".join(map(str, cycles))


def test_core_imports_nothing_above_it() -> None:
    """The core names no op module, cost model, lowering or runtime, even for type hints."""
    core = [m for m in MODULES if layer_of(m) == 0]
    assert "xlgraph.core.tensor" in core and "xlgraph.core.op" in core
    above = [(m, t) for m in core for t, _, _ in imports(m) if layer_of(t) > 0]
    assert not above


def test_import_xlgraph_leaves_the_fetch_and_file_tools_unloaded() -> None:
    """`import xlgraph` (the cold start of every program) loads no module that only a download,
    a checkpoint file, a rendering, a chunk thread pool, Jupyter, PopTorch or popxl-addons
    programs, MPI or a compiled backend needs: tqdm alone is 40 modules, torch hundreds."""
    heavy = ["tqdm", "subprocess", "tempfile", "zipfile", "concurrent.futures", "logging",
             "email", "importlib.metadata", "xlgraph.datasets.sources", "xlgraph.progress",
             "IPython", "ipykernel", "ipywidgets", "jupyter_client", "nbformat",
             "xlgraph.notebook", "xlgraph.poptorch", "xlgraph.addons", "xlgraph.vision",
             "xlgraph.dist", "xlgraph.ipu.page", "torch", "numba", "jax", "mpi4py", "PIL"]
    code = f"import sys, xlgraph; print(sorted(set({heavy!r}) & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).resolve().parents[1])
    assert done.stdout.strip() == "[]", done.stdout


@pytest.mark.parametrize("source, expected", [
    ("from xlgraph.lower import plan\n", "xlgraph.lower.plan"),
    ("def f():\n    from xlgraph import ops\n", "xlgraph.ops"),
    ("if TYPE_CHECKING:\n    import xlgraph.runtime.session\n", "xlgraph.runtime.session"),
    ("from ..lower.plan import Plan\n", "xlgraph.lower.plan"),
])
def test_the_walk_sees_every_kind_of_import(source: str, expected: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain, a lazy, a TYPE_CHECKING and a relative import of a higher layer all count."""
    (tmp_path / "context.py").write_text(source)
    monkeypatch.setitem(MODULES, "xlgraph.core.context", tmp_path / "context.py")
    found = [t for t, _, _ in imports("xlgraph.core.context")]
    assert found == [expected]
    assert layer_of(found[0]) > layer_of("xlgraph.core.context")


def test_a_cycle_across_packages_is_found() -> None:
    edges = {"xlgraph.op": {"xlgraph.ops.math"}, "xlgraph.ops.math": {"xlgraph.op"},
             "xlgraph.cost": set()}
    assert _cycles(edges) == [["xlgraph.op", "xlgraph.ops.math"]]


def test_a_cycle_inside_a_package_is_found_and_init_reexports_are_not_cycles() -> None:
    inside = {"xlgraph.ops.elementwise": {"xlgraph.ops.var_updates"},
              "xlgraph.ops.var_updates": {"xlgraph.ops.elementwise"}}
    assert _cycles(_without_reexports(inside)) == [sorted(inside)]
    reexport = {"xlgraph.ops": {"xlgraph.ops.elementwise"},
                "xlgraph.ops.elementwise": {"xlgraph.ops"}}
    assert _cycles(reexport) == [sorted(reexport)]
    assert _cycles(_without_reexports(reexport)) == []
    # A module outside the package that imports it, imported back by a re-exported module.
    through = {"xlgraph.ops": {"xlgraph.ops.elementwise"},
               "xlgraph.ops.elementwise": {"xlgraph.core.op"},
               "xlgraph.core.op": {"xlgraph.ops"}}
    assert _cycles(_without_reexports(through)) == [sorted(through)]


def test_a_type_only_import_closes_a_cycle(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``TYPE_CHECKING`` import back up a chain is a cycle (tensor -> graph for a hint, graph
    -> tensor to run)."""
    (tmp_path / "tensor.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from xlgraph.core.graph import Graph\n")
    (tmp_path / "graph.py").write_text("from xlgraph.core.tensor import Tensor\n")
    monkeypatch.setitem(MODULES, "xlgraph.core.tensor", tmp_path / "tensor.py")
    monkeypatch.setitem(MODULES, "xlgraph.core.graph", tmp_path / "graph.py")
    edges = {m: import_edges()[m] for m in ("xlgraph.core.tensor", "xlgraph.core.graph")}
    assert _cycles(_without_reexports(edges)) == [["xlgraph.core.graph", "xlgraph.core.tensor"]]


def test_the_picture_in_docs_is_the_table() -> None:
    """docs/architecture.md draws LAYERS, top layer first."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    picture = re.search(r"<!-- layers:.*?-->\n```text\n(.*?)```", text, re.S)
    assert picture, "docs/architecture.md lost its layer picture"
    drawn: list[tuple[str, list[str]]] = []
    for line in picture.group(1).splitlines():
        name, _, rest = line.partition(" ") if not line.startswith(" ") else ("", "", line)
        if name:
            drawn.append((name, []))
        drawn[-1][1].extend(p.strip() for p in rest.split(",") if p.strip())
    expected = [(name, [p.removeprefix("xlgraph.") for p in prefixes])
                for name, prefixes in reversed(LAYERS)]
    assert drawn == expected
