"""popxl-addons programs as their users write them (``import popxl, popxl_addons as addons``),
each run unchanged as a script through ``python -m xlgraph.popxl_compat --device ipu_model``:
the aliases, the nested module paths and the behaviours the programs check (see each file's
docstring). A program exits non-zero listing every expectation that failed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).resolve().parent / "programs"
NAMES = sorted(p.stem for p in PROGRAMS.glob("*.py") if p.stem != "checks")


@pytest.mark.parametrize("name", NAMES)
def test_program_runs_through_the_compat_runner(name: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run([sys.executable, "-m", "xlgraph.popxl_compat", "--device", "ipu_model",
                           str(PROGRAMS / f"{name}.py")], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.rstrip().endswith("OK")
