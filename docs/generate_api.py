"""Generate ``docs/api.md``, the reference of xlgraph's library modules, from their docstrings.

Usage: ``python docs/generate_api.py`` rewrites docs/api.md; ``--check`` only compares and exits
with status 1 when the file is out of date. A module joins the reference by one line in
``MODULES``.
"""

from __future__ import annotations

import ast
import enum
import importlib
import inspect
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "docs")]

from generate_ops import first_sentence, signature, write_or_check  # noqa: E402

OUTPUT = ROOT / "docs" / "api.md"

# The documented modules, in reading order. Add one line per new public module.
MODULES = [
    "xlgraph.nn",
    "xlgraph.optim",
    "xlgraph.training",
    "xlgraph.data",
    "xlgraph.datasets",
    "xlgraph.checkpoint",
    "xlgraph.transforms",
    "xlgraph.vision.datasets",
    "xlgraph.vision.transforms",
    "xlgraph.poptorch",
    "xlgraph.poptorch.optim",
    "xlgraph.fp8_utils",
    "xlgraph.utils",
    "xlgraph.random_seed",
    "xlgraph.tensorlocation",
    "xlgraph.typing_",
    "xlgraph.testing",
    "xlgraph.popxl_compat",
]

NO_DOC = "(no docstring)"


def _purpose(obj: Any) -> str:
    doc = inspect.getdoc(obj)
    return first_sentence(doc) if doc else NO_DOC


def _constant_comments(module: ModuleType) -> dict[str, str]:
    """``{NAME: comment}`` for module-level ``NAME = ...`` assignments: the ``#`` comment on the
    line(s) just above, or at the end of the assignment's first line."""
    source = inspect.getsource(module)
    lines = source.splitlines()
    out: dict[str, str] = {}
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        for target in targets:
            if not isinstance(target, ast.Name):
                continue
            above = []
            i = node.lineno - 2
            while i >= 0 and lines[i].lstrip().startswith("#"):
                above.insert(0, lines[i].lstrip().lstrip("#").strip())
                i -= 1
            trailing = lines[node.lineno - 1].partition("  # ")[2].strip()
            out[target.id] = " ".join(above) or trailing
    return out


def _comments(module: ModuleType) -> dict[str, str]:
    """Constant comments of ``module`` and of its submodules (where a package's constants live)."""
    out: dict[str, str] = {}
    for name, sub in list(sys.modules.items()):
        if name.startswith(f"{module.__name__}.") and sub is not None:
            out.update({k: v for k, v in _constant_comments(sub).items() if v})
    out.update({k: v for k, v in _constant_comments(module).items() if v})
    return out


def public_names(module: ModuleType) -> list[str]:
    """``__all__``, else every name the module defines that does not start with ``_``."""
    if hasattr(module, "__all__"):
        return list(module.__all__)
    defined = set(_constant_comments(module))
    names = []
    for name, obj in vars(module).items():
        if name.startswith("_"):
            continue
        if getattr(obj, "__module__", None) == module.__name__ and (
                inspect.isclass(obj) or inspect.isfunction(obj)):
            names.append(name)
        elif name in defined and name.isupper():
            names.append(name)
    return names


def _value_text(value: Any) -> str:
    text = repr(value)
    if len(text) <= 80:
        return text
    size = f" of {len(value)}" if hasattr(value, "__len__") else ""
    return f"<{type(value).__name__}{size}>"


def _members(cls: type) -> list[str]:
    """The public methods and properties ``cls`` defines itself, one line each."""
    lines = []
    for name, attr in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(attr, property):
            lines.append(f"  - `.{name}` (property): {_purpose(attr)}")
        elif isinstance(attr, staticmethod | classmethod):
            fn = attr.__func__
            shown = signature(fn, f".{name}")
            if isinstance(attr, classmethod):
                shown = shown.replace("(cls, ", "(").replace("(cls)", "()")
            lines.append(f"  - `{shown}`: {_purpose(fn)}")
        elif inspect.isfunction(attr):
            shown = signature(attr, f".{name}").replace("(self, ", "(").replace("(self)", "()")
            lines.append(f"  - `{shown}`: {_purpose(attr)}")
    return lines


def entry(module: ModuleType, name: str, comments: dict[str, str]) -> str:
    """The reference lines of one public name."""
    obj = getattr(module, name)
    if inspect.ismodule(obj):
        return f"- `{name}` (module `{obj.__name__}`): {_purpose(obj)}"
    if inspect.isclass(obj) and issubclass(obj, enum.Enum):
        members = ", ".join(f"`{m.name}`" for m in obj)
        return f"- `{name}` (enum: {members}): {_purpose(obj)}"
    if inspect.isclass(obj):
        bases = [b.__name__ for b in obj.__bases__ if b is not object]
        kind = f"class, subclass of `{'`, `'.join(bases)}`" if bases else "class"
        try:
            shown = signature(obj, name)
        except ValueError:
            shown = name
        return "\n".join([f"- `{shown}` ({kind}): {_purpose(obj)}", *_members(obj)])
    if callable(obj):
        return f"- `{signature(obj, name)}`: {_purpose(obj)}"
    purpose = comments.get(name) or NO_DOC
    return f"- `{name} = {_value_text(obj)}`: {purpose}"


def render() -> str:
    """The full text of docs/api.md."""
    out = [
        "# API reference",
        "",
        "Generated by `python docs/generate_api.py` from the docstrings of the library modules "
        "below; do not edit by hand (`tests/test_api_docs.py` fails when this file is out of "
        "date). Every public name with its signature and defaults and the first sentence of its "
        "docstring; read the docstring (`help(xlgraph.nn.Linear)`) for arguments and examples. "
        "The core API (`Ir`, `Graph`, `Session`, ...) is described in [concepts](concepts.md) "
        "and the ops in the [op reference](ops.md).",
        "",
    ]
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        comments = _comments(module)
        out += [f"## `{module_name}`", "", _purpose(module), ""]
        out += [entry(module, name, comments) for name in public_names(module)]
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    return write_or_check(render(), OUTPUT, argv, "generate_api.py")


if __name__ == "__main__":
    sys.exit(main())
