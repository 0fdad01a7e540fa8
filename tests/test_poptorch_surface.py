"""PopTorch's whole public surface: every entry exists with PopTorch's kind, parameter names,
order and defaults, and the generated support page (docs/poptorch-support.md) is current."""

from __future__ import annotations

import ast
import enum
import inspect
from pathlib import Path

import pytest
from doc_generators import load_generator

pytest.importorskip("torch")

import xlgraph.poptorch as poptorch  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
gen = load_generator("generate_poptorch_support")
ENTRIES = gen.load_surface()
_NAMES = {name: getattr(poptorch, name) for name in poptorch.__all__}


def _default(text: str):
    """A default as written in the surface table, evaluated (enum members by name)."""
    try:
        return ast.literal_eval(text)
    except ValueError:
        owner, member = text.split(".")
        return getattr(_NAMES[owner], member)


def _expected(params: str) -> list[tuple[str, str, object]]:
    out = []
    for part in filter(None, (p.strip() for p in params.split(","))) if "'" not in params \
            else _split(params):
        if part.startswith("**"):
            out.append((part[2:], "VAR_KEYWORD", inspect.Parameter.empty))
        elif part.startswith("*"):
            out.append((part[1:], "VAR_POSITIONAL", inspect.Parameter.empty))
        elif "=" in part:
            name, default = part.split("=", 1)
            out.append((name, "", _default(default)))
        else:
            out.append((part, "", inspect.Parameter.empty))
    return out


def _split(params: str) -> list[str]:
    """Split on commas outside quotes (``separator=', '``)."""
    parts, current, quoted = [], "", False
    for ch in params:
        if ch == "'":
            quoted = not quoted
        if ch == "," and not quoted:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    return [p for p in parts + [current.strip()] if p]


def _actual(obj, kind: str) -> list[inspect.Parameter]:
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, property):
        obj = obj.fset
    target = obj.__init__ if isinstance(obj, type) else obj
    params = list(inspect.signature(target).parameters.values())
    if isinstance(obj, type) or kind == "method":
        params = params[1:]  # self
    return params


def _check_kind(entry, obj) -> None:
    kind = entry["kind"]
    if kind in ("class", "options-sub-object"):
        assert isinstance(obj, type), f"{gen.path(entry)} is not a class"
    elif kind == "function":
        assert callable(obj) and not isinstance(obj, type), f"{gen.path(entry)} not a function"
    elif kind == "property":
        assert isinstance(obj, property), f"{gen.path(entry)} is not a property"
    elif kind == "staticmethod":
        assert isinstance(obj, staticmethod), f"{gen.path(entry)} is not a staticmethod"
    elif kind == "member":
        assert isinstance(obj, enum.Enum), f"{gen.path(entry)} is not an enum member"
    elif kind == "method":
        settable = isinstance(obj, property) and obj.fset is not None  # rng_state(state)
        assert callable(obj) or settable, f"{gen.path(entry)} is not a method"


@pytest.mark.parametrize("entry", ENTRIES, ids=[gen.path(e) for e in ENTRIES])
def test_entry_matches_poptorch(entry):
    obj = gen.resolve(entry)
    _check_kind(entry, obj)
    if entry["params"] is None or entry["kind"] in ("property", "member"):
        return
    expected = _expected(entry["params"])
    actual = _actual(obj, entry["kind"])
    head = actual[: len(expected)]
    assert [p.name for p in head] == [name for name, _, _ in expected], (
        f"{gen.path(entry)}: parameters {[p.name for p in actual]}, PopTorch's "
        f"{[name for name, _, _ in expected]}")
    for p, (name, star, default) in zip(head, expected):
        if star:
            assert p.kind.name == star, f"{gen.path(entry)}: {name} should be {star}"
        else:
            assert p.default == default, f"{gen.path(entry)}: {name}={p.default!r}, " \
                                         f"PopTorch's {default!r}"
    for extra in actual[len(expected):]:  # only keyword-only extras (or **kwargs) after
        assert extra.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD), \
            f"{gen.path(entry)}: extra parameter {extra.name} must be keyword-only"


def test_the_surface_copy_covers_every_section():
    sections = {e["section"] for e in ENTRIES}
    assert len(ENTRIES) > 250 and len(sections) == 8


def test_support_page_is_current():
    assert gen.main(["--check"]) == 0, \
        "docs/poptorch-support.md is out of date; run python docs/generate_poptorch_support.py"


def test_support_page_is_linked_from_the_poptorch_guide():
    assert "(poptorch-support.md)" in (ROOT / "docs" / "poptorch.md").read_text()


def test_every_status_names_a_surface_entry():
    paths = {gen.path(e) for e in ENTRIES}
    stray = sorted(set(poptorch.support.STATUS) - paths)
    assert not stray, f"support.STATUS keys that are not PopTorch entries: {stray}"


def test_unknown_names_fail_in_one_line_naming_the_page():
    with pytest.raises(AttributeError) as info:
        poptorch.setAvailableMemoryProportionTypo  # noqa: B018
    message = str(info.value)
    assert "setAvailableMemoryProportionTypo" in message and "poptorch-support.md" in message
    assert "\n" not in message
    with pytest.raises(AttributeError, match="Options.notAnOption.*poptorch-support.md"):
        poptorch.Options().notAnOption  # noqa: B018


def test_refused_names_fail_in_one_line_naming_the_page():
    with pytest.raises(poptorch.Error) as info:
        poptorch.fps(None, None)
    message = str(info.value)
    assert "poptorch.fps" in message and "poptorch-support.md" in message
    assert "\n" not in str(info.value)
