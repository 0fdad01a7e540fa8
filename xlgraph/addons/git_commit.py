"""``GIT_COMMIT``: the short commit of the user's project (the git repository holding the
working directory at import time, parents searched), or None.

Read from the repository's files (``HEAD``, loose refs, ``packed-refs``; worktrees and
``.git`` files followed), without running git.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["git_commit"]


def _git_dir(start: Path) -> Path | None:
    for folder in [start, *start.parents]:
        dot = folder / ".git"
        if dot.is_dir():
            return dot
        if dot.is_file():
            text = dot.read_text().strip()
            if text.startswith("gitdir:"):
                target = Path(text.partition(":")[2].strip())
                return target if target.is_absolute() else (folder / target).resolve()
    return None


def _resolve(git_dir: Path, ref: str) -> str | None:
    common = git_dir
    if (git_dir / "commondir").is_file():
        common = (git_dir / (git_dir / "commondir").read_text().strip()).resolve()
    for base in (git_dir, common):
        loose = base / ref
        if loose.is_file():
            return loose.read_text().strip()
    packed = common / "packed-refs"
    if packed.is_file():
        for line in packed.read_text().splitlines():
            sha, _, name = line.partition(" ")
            if name == ref:
                return sha
    return None


def git_commit(start: str | os.PathLike | None = None) -> str | None:
    """The 7-character commit of the repository holding ``start`` (default: the working
    directory), or None when there is none or it cannot be read."""
    try:
        git_dir = _git_dir(Path(start or os.getcwd()).resolve())
        if git_dir is None:
            return None
        head = (git_dir / "HEAD").read_text().strip()
        sha = _resolve(git_dir, head[5:].strip()) if head.startswith("ref:") else head
        if sha and len(sha) >= 7 and all(c in "0123456789abcdef" for c in sha.lower()):
            return sha[:7]
    except (OSError, ValueError):
        return None
    return None
