"""Run notebooks through the xlgraph Jupyter kernel, installed into a temporary
``JUPYTER_DATA_DIR``, with nbclient (the ``notebook`` extra)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
KERNEL = "xlgraph-test"


@pytest.fixture(scope="module", name="kernel")
def kernel_fixture(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The kernel's name, installed for this module's tests (``--user`` into a temporary
    ``JUPYTER_DATA_DIR``) and removed after them."""
    pytest.importorskip("ipykernel")
    pytest.importorskip("nbclient")
    data = tmp_path_factory.mktemp("jupyter")
    patch = pytest.MonkeyPatch()
    patch.setenv("JUPYTER_DATA_DIR", str(data))
    patch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    patch.setenv("XLGRAPH_DATA_VERIFY", "0")  # synthetic data, not the real files
    done = runner("--install-kernel", "--user", "--name", KERNEL)
    assert done.returncode == 0, done.stderr
    assert (data / "kernels" / KERNEL / "kernel.json").is_file()
    yield KERNEL
    runner("--uninstall-kernel", "--name", KERNEL)
    patch.undo()


def runner(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m xlgraph.popxl_compat ARGS`` in this environment."""
    return subprocess.run([sys.executable, "-m", "xlgraph.popxl_compat", *args],
                          capture_output=True, text=True, timeout=120)


def execute(notebook: Any, kernel_name: str, cwd: Path, timeout: int = 300) -> Any:
    """Run every cell of ``notebook`` (an nbformat node) in ``cwd``; return it, outputs
    filled in. A cell that raises fails the run (nbclient's ``CellExecutionError``). The
    kernel's start and each cell's last outputs get ``timeout`` too: nbclient's defaults (60 s
    and 4 s, after which it goes on without the outputs) are short for a loaded machine."""
    import nbclient

    client = nbclient.NotebookClient(notebook, kernel_name=kernel_name, timeout=timeout,
                                     startup_timeout=timeout, iopub_timeout=timeout,
                                     resources={"metadata": {"path": str(cwd)}})
    client.execute()
    return notebook


def outputs(notebook: Any) -> list[dict[str, Any]]:
    """Every output of every cell, in order."""
    return [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]


def text_of(notebook: Any) -> str:
    """The text every cell printed (stdout and stderr streams, text/plain results)."""
    parts = []
    for o in outputs(notebook):
        if o["output_type"] == "stream":
            parts.append(o["text"])
        elif "data" in o and "text/plain" in o["data"]:
            parts.append(o["data"]["text/plain"] + "\n")
    return "".join(parts)
