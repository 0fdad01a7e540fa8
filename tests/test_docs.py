"""Every ```python block of README.md and docs/*.md runs, in order, one namespace per file; a
block that does not say it continues the one above also runs alone."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
CONTINUES = "# (continues the snippet above)\n"  # the first line of a block that needs the last


# ``print(...)  # OUTPUT``: a comment that starts like printed values claims the output
CLAIM = re.compile(r"^\s*print\(.*\)\s+#\s*((?:[-(\[{'\"\d]|True|False|torch\.Size).*)$")


def _same_start(printed: str, claim: str) -> bool:
    """Whether ``claim`` begins with ``printed`` (whitespace runs count as one space)."""
    printed, claim = " ".join(printed.split()), " ".join(claim.split())
    return claim == printed or claim.startswith(printed + " ") or \
        claim.startswith(printed + ":")


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_snippets_run(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every block runs, and every output a ``print(...)  # ...`` comment claims is printed."""
    blocks = BLOCK.findall(path.read_text())
    monkeypatch.chdir(tmp_path)
    printed: dict[tuple[str, int], str] = {}

    def record(*args: object, **kwargs: object) -> None:
        frame = sys._getframe(1)
        text = " ".join(map(str, args))
        printed.setdefault((frame.f_code.co_filename, frame.f_lineno), text)
        print(*args, **kwargs)

    namespace: dict[str, object] = {"__name__": f"docs_{path.stem}", "print": record}
    for i, code in enumerate(blocks):
        name = f"{path.name}[block {i}]"
        exec(compile(code, name, "exec"), namespace)  # noqa: S102
        for lineno, line in enumerate(code.splitlines(), 1):
            claim = CLAIM.match(line)
            if claim and (name, lineno) in printed:
                assert _same_start(printed[name, lineno], claim.group(1)), (
                    f"{name} line {lineno} prints {printed[name, lineno]!r}, the comment says "
                    f"{claim.group(1)!r}")


STANDALONE = [(path, i) for path in DOCS
              for i, code in enumerate(BLOCK.findall(path.read_text()))
              if i > 0 and not code.startswith(CONTINUES)]


@pytest.mark.parametrize("path, index", STANDALONE, ids=lambda v: getattr(v, "name", str(v)))
def test_snippets_not_marked_as_continuing_run_alone(path: Path, index: int, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    code = BLOCK.findall(path.read_text())[index]
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"{path.name}[block {index}]", "exec"), {"__name__": "alone"})  # noqa: S102


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_the_first_snippet_continues_nothing(path: Path) -> None:
    blocks = BLOCK.findall(path.read_text())
    assert not blocks or not blocks[0].startswith(CONTINUES)


def test_readme_test_command_is_what_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    command = next(line for line in ci.splitlines() if "pytest" in line)
    assert command in readme


LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(markdown: str) -> set[str]:
    """GitHub's anchors for the headings of a markdown file."""
    headings = re.findall(r"^#+ (.+)$", markdown, re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("path", [*DOCS, ROOT / "examples" / "mnist" / "README.md",
                                  ROOT / "benchmarks" / "README.md"], ids=lambda p: p.name)
def test_relative_links_point_to_files_and_headings_that_exist(path: Path) -> None:
    for target in LINK.findall(path.read_text()):
        if "://" in target or target.startswith("mailto:"):
            continue
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        assert resolved.exists(), f"{path.name} links to missing {target}"
        if anchor:
            assert anchor in _anchors(resolved.read_text()), f"{path.name}: no heading #{anchor}"
