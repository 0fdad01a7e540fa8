"""The Jupyter kernel "PopXL / PopTorch (xlgraph)": installed and removed by the runner, it runs
a notebook written as Graphcore's tutorials are, cloud-only cells included."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
from notebook_harness import ROOT, execute, kernel_fixture, outputs, runner, text_of  # noqa: F401

from xlgraph.notebook.cloud import cloud_note, skip_cloud_lines

nbformat = pytest.importorskip("nbformat")

TUTORIAL = [
    "%pip install -r requirements.txt",
    "!gc-monitor",
    "%env POPLAR_LOG_LEVEL=INFO",
    """\
from functools import partial

import numpy as np
import popxl
import popxl.ops as ops
import popxl_addons as addons
from tqdm import tqdm
import matplotlib.pyplot as plt
%matplotlib inline""",
    """\
class Linear(addons.Module):
    def __init__(self, out_features):
        super().__init__()
        self.out_features = out_features

    def build(self, x):
        init = partial(np.random.normal, 0, 0.02, (x.shape[-1], self.out_features))
        return x @ self.add_variable_input("weight", init, x.dtype)


np.random.seed(1)
ir = popxl.Ir()
with ir.main_graph:
    x_stream = popxl.h2d_stream((2, 4), popxl.float32, "x")
    x = ops.host_load(x_stream)
    facts, graph = Linear(3).create_graph(x)
    variables = facts.init()
    y, = graph.bind(variables).call(x)
    y_stream = popxl.d2h_stream(y.shape, y.dtype, "y")
    ops.host_store(y_stream, y)""",
    """\
session = popxl.Session(ir, "ipu_hw")
weight = session.get_tensor_data(variables.weight)
losses = []
with session:
    for step in tqdm(range(3)):
        data = np.full((2, 4), step, np.float32)
        out = session.run({x_stream: data})[y_stream]
        np.testing.assert_allclose(out, data @ weight, rtol=1e-6)
        losses.append(float(out.sum()))
print("tiles", session.device.model.tiles, "sums", losses)
plt.plot(losses)
plt.show()""",
    """\
import sys

sys.modules["ipywidgets"] = None  # as if not installed: xlgraph's bars are text
from xlgraph.progress import tqdm as xlgraph_tqdm

print("bar class from", xlgraph_tqdm.__mro__[1].__module__)
for _ in xlgraph_tqdm(range(3), desc="text bar", mininterval=0):
    pass""",
]


def test_a_tutorial_notebook_runs_unchanged(kernel: str, tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text(
        "numpy>=1.24\npopxl-addons @ git+https://github.com/graphcore/popxl-addons.git"
        "@sdk-release-3.3.0\n")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in TUTORIAL]
    execute(notebook, kernel, tmp_path)
    text = text_of(notebook)
    assert "xlgraph: skipped `%pip install -r requirements.txt`: xlgraph provides popxl_addons; "\
           "install the others yourself if you need them: numpy>=1.24" in text
    assert "xlgraph: skipped `gc-monitor`" in text
    assert "POPLAR_LOG_LEVEL is read by Graphcore's SDK only; xlgraph ignores it" in text
    assert "tiles 1472 sums" in text  # "ipu_hw" ran on the model of a whole chip
    assert not [o for o in outputs(notebook) if o["output_type"] == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs(notebook))  # the inline plot
    assert "bar class from tqdm.std" in text  # shown, though the kernel's stream is no tty:
    assert re.search(r"text bar: 100%\|█+\| 3/3", text)


def test_install_and_uninstall(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ipykernel")
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path))
    done = runner("--install-kernel", "--user", "--name", "mine")
    assert done.returncode == 0, done.stderr
    spec = json.loads((tmp_path / "kernels" / "mine" / "kernel.json").read_text())
    assert spec["display_name"] == "PopXL / PopTorch (xlgraph)"
    assert spec["argv"][1:] == ["-m", "ipykernel_launcher", "-f", "{connection_file}", "--ext",
                                "xlgraph.notebook"]
    assert os.path.samefile(spec["argv"][0], sys.executable)
    done = runner("--uninstall-kernel", "--name", "mine")
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "kernels" / "mine").exists()
    done = runner("--uninstall-kernel", "--name", "mine")
    assert done.returncode == 1
    assert done.stderr.strip() == ("error: no Jupyter kernel named 'mine' is installed "
                                   "(jupyter kernelspec list shows the installed ones)")
    done = runner("--install-kernel", "--user", "--name", "bad/name")  # jupyter's name rule
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("error: Invalid kernel name 'bad/name'.")


@pytest.mark.parametrize("line, note", [
    ("!gc-monitor", "xlgraph: skipped `gc-monitor`: it reports Graphcore IPUs, and this kernel "
                    "runs on xlgraph's IPU model"),
    ("%pip install /opt/sdk/poptorch-3.3.0+1403-cp38-cp38-linux_x86_64.whl",
     "xlgraph: skipped `%pip install /opt/sdk/poptorch-3.3.0+1403-cp38-cp38-linux_x86_64.whl`: "
     "xlgraph provides poptorch"),
    ("!python -m pip install -q -f https://wheels/poptorch.html torchvision", None),
    ("!pip install -q 'popxl-addons @ git+https://x/popxl-addons.git' tqdm",
     "xlgraph: skipped `!pip install -q 'popxl-addons @ git+https://x/popxl-addons.git' tqdm`: "
     "xlgraph provides popxl_addons; install the others yourself if you need them: tqdm"),
    ("%pip install numpy", None),
    ("!pip install git+ssh://git@github.com/graphcore/popxl-addons.git@sdk-release-3.3",
     "xlgraph: skipped `!pip install git+ssh://git@github.com/graphcore/popxl-addons.git"
     "@sdk-release-3.3`: xlgraph provides popxl_addons"),
    ("!pip install git+https://github.com/graphcore/popxl-addons.git@release/3.3",
     "xlgraph: skipped `!pip install git+https://github.com/graphcore/"
     "popxl-addons.git@release/3.3`: xlgraph provides popxl_addons"),
    ("!pip install git+ssh://git@github.com/someone/tool.git", None),
    ("!{sys.executable} -m pip install -r /no/such/requirements.txt poptorch",
     "xlgraph: skipped `!{sys.executable} -m pip install -r /no/such/requirements.txt "
     "poptorch`: xlgraph provides poptorch"),
    ("%env POPTORCH_LOG_LEVEL=ERR", "xlgraph: POPTORCH_LOG_LEVEL is read by Graphcore's SDK "
                                    "only; xlgraph ignores it"),
    ("%env POPLAR_ENGINE_OPTIONS={\"autoReport.all\": \"true\"}", None),  # xlgraph reads it
    ("x = 1  # !gc-monitor", None),
])
def test_cloud_lines(line: str, note: str | None) -> None:
    assert cloud_note(line) == note


def test_skipped_lines_keep_their_indentation() -> None:
    lines = ["if True:\n", "    !gc-monitor\n", "    x = 1\n"]
    out = skip_cloud_lines(lines)
    assert out[0] == lines[0] and out[2] == lines[2]
    assert out[1].startswith("    print(") and compile("".join(out), "cell", "exec")



def test_load_ext_in_a_plain_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``%load_ext xlgraph.notebook`` gives any IPython kernel what the xlgraph kernel has."""
    pytest.importorskip("ipykernel")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH",
                                                                                "")]))
    pytest.importorskip("torch")
    cells = ["import importlib.util; print(importlib.util.find_spec('popxl') is None)",
             "%load_ext xlgraph.notebook",
             "import popxl, poptorch, popdist\n"
             "from xlgraph.runtime.device import make_device\n"
             "print(popxl.__name__, poptorch.__name__, popdist.__name__, "
             "make_device('ipu_hw').model.tiles)",
             "!gc-monitor"]
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    execute(notebook, "python3", tmp_path)  # ipykernel's own kernel, in this Python
    assert text_of(notebook).splitlines() == [
        "True", "xlgraph xlgraph.poptorch xlgraph.dist 1472",
        "xlgraph: skipped `gc-monitor`: it reports Graphcore IPUs, and this kernel runs on "
        "xlgraph's IPU model"]


def test_install_goes_into_this_environment(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``--user`` the kernelspec goes under ``sys.prefix``, where a Jupyter of the same
    environment looks (``jupyter_path``)."""
    pytest.importorskip("ipykernel")
    from jupyter_core.paths import jupyter_path

    from xlgraph.notebook.kernelspec import install_kernel

    assert os.path.join(sys.prefix, "share", "jupyter") in jupyter_path()
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    where = install_kernel("env-kernel")
    assert where == tmp_path / "share" / "jupyter" / "kernels" / "env-kernel"
    assert json.loads((where / "kernel.json").read_text())["argv"][-1] == "xlgraph.notebook"
