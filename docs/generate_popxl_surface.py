"""Check xlgraph against PopXL 3.3's public surface and generate ``docs/popxl-surface.md``.

The table of PopXL names, kinds and signatures is ``tests/data/popxl_surface.json`` (one row per
public name: ``kind`` is ``function``, ``class`` or ``name``; classes list their members with
``property``, ``method`` or ``classmethod``; parameters are written ``name``, ``name=default``,
``*args`` or ``**kwargs``). ``check(path, row)`` resolves the PopXL path through xlgraph and
returns the differences; ``tests/test_popxl_surface.py`` runs it on every row. A row that cannot
match is listed in ``DEVIATIONS`` with the reason, and the generated page shows those rows.

Usage: ``python docs/generate_popxl_surface.py`` rewrites docs/popxl-surface.md; ``--check`` only
compares and exits with status 1 when the file is out of date.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs"))

from generate_ops import write_or_check  # noqa: E402

TABLE = ROOT / "tests" / "data" / "popxl_surface.json"
OUTPUT = ROOT / "docs" / "popxl-surface.md"

_PRIVATE_CONSTRUCTOR = (
    "PopXL builds these from PopART objects and its `__init__` takes no arguments; programs get "
    "them from factories (`popxl.variable`, `ir.create_graph`, ...), never by calling the class. "
    "xlgraph's constructor takes the parts it is built from.")

_MSE_INTERNALS = (
    "A step inside PopXL's histogram search behind `host_fp8_mse_scale`; PopXL documents "
    "neither its arguments' meaning nor its result. xlgraph has `host_fp8_mse_scale` (and "
    "`_pb`), `log_histogram` and `find_exponential_range`, and does not invent this step.")

# PopXL rows xlgraph does not match, with the reason. The test fails when a row listed here
# matches (remove it) or a row not listed differs (fix it).
DEVIATIONS: dict[str, str] = {
    "popxl.dtype.__init__": _PRIVATE_CONSTRUCTOR,
    "popxl.Graph.__init__": _PRIVATE_CONSTRUCTOR,
    "popxl.Tensor.__init__": _PRIVATE_CONSTRUCTOR,
    "popxl.ReplicaGrouping.__init__": _PRIVATE_CONSTRUCTOR + " (`ir.replica_grouping(...)`)",
    "popxl.transforms.ExpectedConnection.__init__": _PRIVATE_CONSTRUCTOR
    + " (`GradGraphInfo.expected_inputs`)",
    "popxl.transforms.GradGraphInfo.__init__": _PRIVATE_CONSTRUCTOR + " (`autodiff`)",
    "popxl.fp8_utils.CandidateConfig": _MSE_INTERNALS,
    "popxl.fp8_utils.calculate_metric_mse": _MSE_INTERNALS,
    "popxl.fp8_utils.calculate_candidate_metric": _MSE_INTERNALS,
}


def load_table(path: Path = TABLE) -> dict[str, dict[str, Any]]:
    """The PopXL surface table: PopXL path -> row."""
    return json.loads(path.read_text())


def resolve(path: str) -> Any:
    """The xlgraph object at PopXL's ``path`` (``popxl.ops.collectives.CommGroup`` ->
    ``xlgraph.ops.collectives.CommGroup``): attributes first, as ``popxl.ops.call`` is the
    function even where a submodule of that name exists; modules are imported on demand."""
    parts = path.split(".")
    obj: Any = importlib.import_module("xlgraph")
    name = "xlgraph"
    for part in parts[1:]:
        name += "." + part
        if hasattr(obj, part):
            obj = getattr(obj, part)
        else:
            obj = importlib.import_module(name)
    return obj


def _text(p: inspect.Parameter) -> str:
    star = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "")
    default = "" if p.default is p.empty else "=" + repr(p.default)
    return star + p.name + default


def _same_default(want: str, got: Any) -> bool:
    try:
        value = ast.literal_eval(want)
    except ValueError:
        if want.startswith("float("):
            return isinstance(got, float) and got == float(want[7:-2])
        # a named value such as ``TensorStorage.OnChip`` or ``dtypes.float32``
        owner, _, attr = want.rpartition(".")
        return getattr(got, "name", None) == attr or repr(got).endswith(attr)
    return type(value) is type(got) and value == got


def check_params(fn: Any, want: list[str], skip_first: bool) -> list[str]:
    """Differences between ``fn``'s parameters and PopXL's ``want`` (same names in the same
    order, same defaults where PopXL has one; extra keyword-only parameters may follow)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError) as exc:
        return [f"no signature ({exc})"]
    if skip_first and params and params[0].name in ("self", "cls"):
        params = params[1:]
    names = [w.split("=", 1)[0] for w in want]
    got = [_text(p).split("=", 1)[0] for p in params]
    extra = params[len(want):]
    if got[:len(names)] != names or any(
            p.kind not in (p.KEYWORD_ONLY, p.VAR_KEYWORD) for p in extra):
        return [f"parameters ({', '.join(want)}) expected, xlgraph has "
                f"({', '.join(_text(p) for p in params)})"]
    out = []
    for w, p in zip(want, params):
        if "=" in w and (p.default is p.empty or not _same_default(w.split("=", 1)[1], p.default)):
            out.append(f"default of {p.name}: PopXL {w.split('=', 1)[1]}, xlgraph "
                       f"{'none' if p.default is p.empty else repr(p.default)}")
    return out


def _member_kind(owner: type, name: str, sample: Any) -> str | None:
    """``property``, ``method`` or ``classmethod`` as a user sees the member (an attribute an
    instance reads counts as a property), None when missing."""
    raw = None
    for klass in owner.__mro__:
        if name in vars(klass):
            raw = vars(klass)[name]
            break
    if isinstance(raw, classmethod):
        return "classmethod"
    if isinstance(raw, staticmethod):
        return "staticmethod"
    if raw is not None and (inspect.isfunction(raw) or inspect.ismethoddescriptor(raw)):
        return "method"
    if raw is not None and hasattr(raw, "__get__") or raw is not None and not callable(raw):
        return "property"
    if sample is not None and hasattr(sample, name) and not callable(getattr(sample, name)):
        return "property"
    return None


def check(path: str, row: dict[str, Any], samples: dict[str, Any] | None = None) -> list[str]:
    """Differences between PopXL's ``row`` and xlgraph's object at ``path``: one text per
    difference, prefixed with the member's path. ``samples`` maps a class path to an instance,
    whose attributes count as properties."""
    try:
        obj = resolve(path)
    except (AttributeError, ImportError) as exc:
        return [f"{path}: missing ({exc})"]
    kind = row["kind"]
    if kind == "name":
        return []
    if kind == "function":
        if inspect.isclass(obj) or not callable(obj):
            return [f"{path}: a function expected, xlgraph has {type(obj).__name__}"]
        return [f"{path}: {d}" for d in check_params(obj, row["params"], skip_first=False)]
    if not inspect.isclass(obj):
        return [f"{path}: a class expected, xlgraph has {type(obj).__name__}"]
    out = []
    sample = (samples or {}).get(path)
    for name, member in row["members"].items():
        label = f"{path}.{name}"
        if name == "__init__":
            if obj.__init__ is object.__init__:
                continue
            out += [f"{label}: {d}" for d in check_params(obj.__init__, member["params"], True)]
            continue
        got = _member_kind(obj, name, sample)
        if got != member["kind"]:
            out.append(f"{label}: a {member['kind']} expected, xlgraph has {got or 'nothing'}")
        elif got in ("method", "classmethod"):
            fn = getattr(obj, name)
            out += [f"{label}: {d}" for d in check_params(fn, member["params"], got == "method")]
    return out


def render(table: dict[str, dict[str, Any]] | None = None) -> str:
    """The full text of docs/popxl-surface.md."""
    table = load_table() if table is None else table
    members = sum(len(r.get("members", {})) for r in table.values())
    out = [
        "# PopXL surface conformance",
        "",
        "Generated by `python docs/generate_popxl_surface.py` from `tests/data/popxl_surface.json` "
        "(PopXL 3.3's public names with their parameter names, order and defaults); do not edit "
        "by hand. `tests/test_popxl_surface.py` imports every name from its PopXL module path "
        "through xlgraph and checks its kind and signature with `inspect.signature`: same "
        "parameter names in the same order, the same defaults where PopXL has one; xlgraph may "
        "add keyword-only parameters after PopXL's.",
        "",
        f"The table has {len(table)} names and {members} class members. Every row matches "
        f"except the {len(DEVIATIONS)} below.",
        "",
        "| PopXL | Why xlgraph differs |",
        "|---|---|",
    ]
    for path in sorted(DEVIATIONS):
        cls, _, member = path.rpartition(".")
        row = table.get(path) or table[cls]["members"][member]
        params = ", ".join(row.get("params") or row.get("members", {}).get(
            "__init__", {}).get("params", []))
        out.append(f"| `{path}({params})` | {DEVIATIONS[path]} |")
    out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    return write_or_check(render(), OUTPUT, argv, "generate_popxl_surface.py")


if __name__ == "__main__":
    sys.exit(main())
