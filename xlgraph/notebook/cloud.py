"""Notebook lines that only make sense on Graphcore's cloud, skipped in the xlgraph kernel.

Graphcore's tutorial notebooks open with cells such as ``%pip install -r requirements.txt``
(the SDK's wheels: poptorch, popxl-addons, ...), ``!gc-monitor`` (the IPUs attached) and
``%env POPLAR_LOG_LEVEL=INFO``. ``skip_cloud_lines`` is an IPython input transformer that runs
before the cell: an install naming a Graphcore SDK package and a ``gc-*`` tool become a
one-line note (xlgraph provides the packages; there is no IPU to monitor), and an ``%env`` of an
IPU-only variable runs with a note that xlgraph ignores it. Every other line is left as written.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

__all__ = ["SDK_PACKAGES", "IPU_ONLY_VARIABLES", "skip_cloud_lines", "cloud_note"]

SDK_PACKAGES = ("poptorch", "popxl", "popxl_addons", "popart", "popdist", "poptorch_geometric",
                "popef", "gcipuinfo", "poplar")
"""Graphcore SDK distributions (``-`` and ``_`` alike): the kernel provides or stands in for
them, or they need an IPU."""

IPU_ONLY_VARIABLES = ("POPLAR_LOG_LEVEL", "POPLAR_LOG_DEST", "POPART_LOG_LEVEL",
                      "POPART_LOG_DEST", "POPTORCH_LOG_LEVEL", "POPLIBS_LOG_LEVEL",
                      "POPLAR_SDK_ENABLED", "POPLAR_RUNTIME_OPTIONS", "POPLAR_EXECUTABLE_CACHE_DIR",
                      "POPTORCH_WAIT_FOR_IPU", "IPUOF_CONFIG_PATH", "IPUOF_VIPU_API_HOST",
                      "IPUOF_VIPU_API_PORT", "IPUOF_VIPU_API_PARTITION_ID", "GCDA_MONITOR",
                      "TF_POPLAR_FLAGS")
"""Variables read by Graphcore's SDK and tools alone: setting one changes nothing here. (The
ones xlgraph reads, such as ``POPLAR_ENGINE_OPTIONS``'s ``autoReport`` keys and
``POPTORCH_CACHE_DIR``, are not in this list.)"""

# ``%pip install``, ``!pip install``, ``!python -m pip install``, ``!{sys.executable} -m pip ...``
_INSTALL = re.compile(r"^\s*(?:%pip|!\s*(?:\S+\s+-m\s+)?pip3?)\s+install\s+(?P<args>.*)$")
_GC_TOOL = re.compile(r"^\s*!\s*(?P<tool>gc-[\w-]+)")
_VALUE_FLAGS = ("-r", "--requirement", "-c", "--constraint", "-f", "--find-links", "-i",
                "--index-url", "--extra-index-url", "-t", "--target", "--prefix", "--root")
_ENV = re.compile(r"^\s*%env\s+(?P<name>[A-Za-z_]\w*)(?:\s*=|\s+\S)")


def _sdk_name(requirement: str) -> str | None:
    """The SDK package that ``requirement`` (a requirement line, a wheel path, a ``git+`` URL)
    names, or None."""
    text = requirement.strip()
    if " @ " in text or "#egg=" in text:
        name = re.split(r" @ |#egg=", text)[1 if "#egg=" in text else 0]
    else:
        if "://" in text:  # a URL: drop the scheme, any ``user@`` and a trailing ``@ref``
            text = re.sub(r"^[^/@]*@", "", text.split("://", 1)[1]).split("@")[0]
        last = re.split(r"[/\\:]", text)[-1]
        name = last.split("-")[0] if last.endswith(".whl") else last.removesuffix(".git")
    name = re.match(r"[A-Za-z0-9_-]*", name.strip()).group(0).lower().replace("-", "_")
    return name if name in SDK_PACKAGES else None


def _requirements(path: Path) -> list[str]:
    lines = [line.split("#")[0].strip() for line in path.read_text().splitlines()]
    return [line for line in lines if line and not line.startswith("-")]


def cloud_note(line: str) -> str | None:
    """The note that replaces ``line`` in the xlgraph kernel, or None to run it as written."""
    tool = _GC_TOOL.match(line)
    if tool:
        return (f"xlgraph: skipped `{tool['tool']}`: it reports Graphcore IPUs, and this "
                "kernel runs on xlgraph's IPU model")
    install = _INSTALL.match(line)
    if install:
        try:
            args = shlex.split(install["args"])
        except ValueError:
            return None
        wanted, files = [], []
        for before, arg in zip(["", *args], args):
            if before in ("-r", "--requirement"):
                files.append(Path(arg))
            elif not arg.startswith("-") and before not in _VALUE_FLAGS:
                wanted.append(arg)
        for path in files:
            wanted += _requirements(path) if path.is_file() else []
        sdk = sorted({p for p in map(_sdk_name, wanted) if p})
        if sdk:
            others = [w for w in wanted if not _sdk_name(w)]
            rest = f"; install the others yourself if you need them: {' '.join(others)}" \
                if others else ""
            return (f"xlgraph: skipped `{line.strip()}`: xlgraph provides "
                    f"{', '.join(sdk)}{rest}")
    env = _ENV.match(line)
    if env and env["name"] in IPU_ONLY_VARIABLES:
        return f"xlgraph: {env['name']} is read by Graphcore's SDK only; xlgraph ignores it"
    return None


def skip_cloud_lines(lines: list[str]) -> list[str]:
    """IPython cleanup transformer: each cloud-only line becomes ``print`` of its note (an
    ``%env`` line still runs, after the note)."""
    out = []
    for line in lines:
        note = cloud_note(line)
        if note is None:
            out.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip())]
        out.append(f"{indent}print({note!r})\n")
        if _ENV.match(line):
            out.append(line if line.endswith("\n") else line + "\n")
    return out
