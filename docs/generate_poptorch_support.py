"""Generate ``docs/poptorch-support.md``: every PopTorch API entry and operation, with its status.

The API part comes from PopTorch's surface (``tests/data/poptorch_surface.json``) and
``xlgraph.poptorch.support.STATUS``; the operation part from PopTorch's supported-ops list
(``tests/data/poptorch_supported_ops.tsv``) and the conversion table ``xlgraph.poptorch.table``.

Usage: ``python docs/generate_poptorch_support.py`` rewrites the page; ``--check`` only compares
and exits with status 1 when it is out of date.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import xlgraph.poptorch as poptorch  # noqa: E402
from xlgraph.poptorch import coverage, options, support, table  # noqa: E402

OUTPUT = ROOT / "docs" / "poptorch-support.md"
SURFACE = ROOT / "tests" / "data" / "poptorch_surface.json"
OPS = ROOT / "tests" / "data" / "poptorch_supported_ops.tsv"
_LABELS = {"supported": "works", support.RECORDED: "accepted, recorded",
           support.IGNORED: "accepted, ignored", support.REFUSED: "refused"}


def load_surface() -> list[dict[str, Any]]:
    """PopTorch's public entries (a copy of the shared surface table)."""
    return json.loads(SURFACE.read_text(encoding="utf-8"))


def owner_object(entry: dict[str, Any]) -> Any:
    """The xlgraph object an entry's ``owner`` names (a class, or an enum)."""
    owner = entry["owner"]
    if owner.startswith("opts."):
        return type(getattr(poptorch.Options(), owner.removeprefix("opts.")))
    if entry["section"].startswith("the model wrapper"):
        return poptorch.PoplarExecutor
    module = {"poptorch.optim": poptorch.optim}.get(entry["section"], poptorch)
    if entry["section"].startswith("poptorch.options sub-objects"):
        module = options
    return getattr(module, owner)


def path(entry: dict[str, Any]) -> str:
    """The entry's name as the support table keys it (``Options.connectionType``...)."""
    owner = entry.get("owner")
    if entry["section"].startswith("the model wrapper"):
        owner = "PoplarExecutor"
    if entry["section"] == "poptorch.optim":
        owner = f"optim.{owner}" if owner else "optim"
    return f"{owner}.{entry['name']}" if owner else entry["name"]


def resolve(entry: dict[str, Any]) -> Any:
    """The xlgraph object of a surface entry (AttributeError when it does not exist)."""
    if entry.get("owner"):
        return inspect.getattr_static(owner_object(entry), entry["name"])
    if entry["kind"] == "options-sub-object":
        return type(getattr(poptorch.Options(), entry["name"].removeprefix("opts.")))
    if entry["section"].startswith("poptorch.options sub-objects"):
        return getattr(options, entry["name"])
    module = poptorch.optim if entry["section"] == "poptorch.optim" else poptorch
    return getattr(module, entry["name"])


def signature(entry: dict[str, Any]) -> str:
    name = entry["name"]
    if entry["kind"] in ("property", "member", "options-sub-object") or entry["params"] is None:
        return f"`{name}`"
    return f"`{name}({entry['params']})`"


def api_rows() -> list[str]:
    lines: list[str] = []
    section = None
    for entry in load_surface():
        if entry["section"] != section:
            section = entry["section"]
            lines += ["", f"### {section}", "", "| entry | kind | status | on xlgraph |",
                      "|---|---|---|---|"]
        state, why = support.status(path(entry))
        owner = f"{entry['owner']}." if entry.get("owner") else ""
        lines.append(f"| {owner}{signature(entry)} | {entry['kind']} | {_LABELS[state]} | "
                     f"{why} |")
    return lines


# -- operations ------------------------------------------------------------------------------------
def _torch_object(name: str) -> Any:
    value: Any = torch if name.startswith("torch.") else None
    for part in name.removesuffix("()").split(".")[1:]:
        value = getattr(value, part, None)
    return value


def converted(name: str) -> bool:
    """Whether the conversion table converts the PopTorch op ``name``."""
    if hasattr(table, "converts"):
        return bool(table.converts(name))
    method = name.split(".")[-1].removesuffix("()")
    obj = _torch_object(name)
    if isinstance(obj, type) and issubclass(obj, torch.nn.Module):
        return obj in table.MODULES
    if name.startswith(("tensor.", "torch.Tensor.")):
        return method in table.METHODS or method.rstrip("_") in table.METHODS
    functional = getattr(torch.nn.functional, method, None)
    return any(f is not None and _in(f, table.FUNCTIONS) for f in (obj, functional)) or \
        method in table.METHODS


def _in(f: Any, mapping: dict[Any, Any]) -> bool:
    try:
        return f in mapping
    except TypeError:
        return False


def op_rows() -> list[str]:
    lines: list[str] = []
    section = None
    done = total = 0
    for row in OPS.read_text(encoding="utf-8").splitlines():
        where, name = row.split("\t")
        if name.startswith("opts."):
            continue  # options, listed with the API above
        if where != section:
            section = where
            lines += ["", f"### {section}", "", "| operation | converted |", "|---|---|"]
        ok = converted(name)
        done, total = done + ok, total + 1
        why = "" if ok else coverage.NOT_CONVERTED.get(name, "")
        lines.append(f"| `{name}` | {'yes' if ok else 'no'}{': ' + why if why else ''} |")
    lines += ["", "### Beyond the list", "",
              "Operations PopTorch converts that its list leaves out, checked by the op sweep "
              "like the rest:", "", "| operation | converted |", "|---|---|"]
    lines += [f"| `{name}` | yes |" for name in sorted(coverage.BEYOND_LIST)]
    return [f"{done} of {total} of PopTorch's listed operations are converted, each checked "
            f"against torch eager by the op sweep (`tests/test_poptorch_sweep.py`: forward and "
            f"gradient, float32 and float16); the rest raise `UnsupportedOpError` naming the op "
            f"and the line of `forward`."] + lines


def render() -> str:
    labels = [_LABELS[s] for s in ("supported", support.RECORDED, support.IGNORED,
                                   support.REFUSED)]
    counts: dict[str, int] = {}
    for entry in load_surface():
        state = _LABELS[support.status(path(entry))[0]]
        counts[state] = counts.get(state, 0) + 1
    summary = ", ".join(f"{counts.get(k, 0)} {k}" for k in labels)
    return "\n".join([
        "# PopTorch support in xlgraph",
        "",
        "Generated by `python docs/generate_poptorch_support.py` from PopTorch's surface table",
        "(`tests/data/poptorch_surface.json`), `xlgraph.poptorch.support.STATUS` and the",
        "conversion table; a test fails when this page drifts. Back to [PopTorch programs]"
        "(poptorch.md).",
        "",
        "Each PopTorch name is one of: **works** (as PopTorch documents it, on the simulator);",
        "**accepted, recorded** (stored with its meaning; pipelining, sharding, memory and",
        "location settings feed the `ipu_model` where it models them); **accepted, ignored**",
        "(no effect on the simulator, for the reason given); **refused** (raises",
        "`poptorch.Error` in one line naming it and this page). A name that is not PopTorch's",
        "raises an `AttributeError` naming it and this page.",
        "",
        f"## API ({summary})",
        *api_rows(),
        "",
        "## Operations",
        "",
        *op_rows(),
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT} is out of date: run python docs/generate_poptorch_support.py")
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
