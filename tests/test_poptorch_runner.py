"""``python -m xlgraph.popxl_compat`` runs a PopTorch program unchanged: ``import poptorch`` is
``xlgraph.poptorch``, in the program and in the processes it starts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from example_data import write_synthetic

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "mnist"


def _runner(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH",
                                                                                  "")]))
    return subprocess.run([sys.executable, "-m", "xlgraph.popxl_compat", *args],
                          capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


def test_seed_003_runs_unchanged(tmp_path: Path) -> None:
    """The finished program of "Running PyTorch on IPU" (the example's port with PopTorch's
    import lines: ``import poptorch``, ``from tqdm import tqdm``) trains with
    ``trainingModel`` and evaluates with ``inferenceModel``; the IPU model's accuracy is the
    CPU module's on the same batches (the trained weights came back to the user's module)."""
    source = (EXAMPLES / "poptorch_port.py").read_text()
    for ours, theirs in (("import xlgraph.poptorch as poptorch", "import poptorch"),
                         ("from xlgraph.progress import tqdm", "from tqdm import tqdm")):
        assert ours in source
        source = source.replace(ours, theirs)
    source += ("    cpu = sum((model(data).argmax(dim=1) == labels).sum().item()\n"
               "              for data, labels in test_dataloader)\n"
               "    print(f'CPU accuracy: {100 * cpu / total:.2f}%', poptorch.__name__)\n")
    (tmp_path / "pytorch_ipu.py").write_text(source)
    (tmp_path / "cli.py").write_text((EXAMPLES / "cli.py").read_text())
    write_synthetic(tmp_path, "FashionMNIST", 32, 64)
    done = _runner(tmp_path, "pytorch_ipu.py", "--data-dir", str(tmp_path), "--epochs", "1")
    assert done.returncode == 0, done.stderr
    ipu = re.search(r"^Eval accuracy: ([\d.]+)%$", done.stdout, re.M)
    cpu = re.search(r"^CPU accuracy: ([\d.]+)% xlgraph.poptorch$", done.stdout, re.M)
    assert ipu and cpu, done.stdout
    assert ipu.group(1) == cpu.group(1)


def test_children_import_poptorch(tmp_path: Path) -> None:
    child = ("import poptorch, popxl; "
             "print(poptorch.__name__, poptorch.Options().replication_factor)")
    (tmp_path / "prog.py").write_text(
        "import subprocess, sys\n"
        f"subprocess.run([sys.executable, '-c', {child!r}], check=True)\n")
    done = _runner(tmp_path, "prog.py")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "xlgraph.poptorch 1"
