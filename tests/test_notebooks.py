"""examples/notebooks/ run top to bottom through the installed xlgraph kernel (nbclient), on
small synthetic data (``example_data.write_synthetic``), and show what they promise: the
accuracy, an inline drawing (SVG), inline HTML (a Session, the report's views), no error."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from example_data import write_synthetic
from notebook_harness import ROOT, execute, kernel_fixture, outputs, text_of  # noqa: F401

nbformat = pytest.importorskip("nbformat")

NOTEBOOKS = ROOT / "examples" / "notebooks"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    write_synthetic(root, "MNIST", 2400, 1600)
    write_synthetic(root, "FashionMNIST", 1600, 96, seed=1)
    return root


def _run(name: str, kernel: str, data: Path, tmp_path: Path,
         monkeypatch: pytest.MonkeyPatch) -> object:
    monkeypatch.setenv("XLGRAPH_DATA", str(data))
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert all(not c.get("outputs") and c.get("execution_count") is None
               for c in notebook.cells if c.cell_type == "code"), "commit it with outputs cleared"
    execute(notebook, kernel, tmp_path)
    assert not [o for o in outputs(notebook) if o["output_type"] == "error"]
    return notebook


def _shown(notebook: object, mime: str) -> list[str]:
    return [o["data"][mime] for o in outputs(notebook) if mime in o.get("data", {})]


def test_every_notebook_is_tested() -> None:
    tested = {"mnist_popxl.ipynb", "poptorch_port.ipynb", "ipu_model_report.ipynb"}
    assert {p.name for p in NOTEBOOKS.glob("*.ipynb")} == tested


@pytest.mark.skipif(shutil.which("dot") is None, reason="needs Graphviz (apt-get install graphviz)")
def test_mnist_popxl(kernel: str, data: Path, tmp_path: Path,
                     monkeypatch: pytest.MonkeyPatch) -> None:
    notebook = _run("mnist_popxl.ipynb", kernel, data, tmp_path, monkeypatch)
    text = text_of(notebook)
    assert "300 training batches of 8, 20 test batches of 80" in text
    accuracy = float(re.search(r"Accuracy on test set: ([\d.]+)%", text).group(1))
    assert accuracy > 90  # the synthetic classes are a bright bar's row: easy to learn
    (svg,) = _shown(notebook, "image/svg+xml")
    assert "cluster" in svg and ">%W0 " in svg  # every graph of the Ir, the variables by name
    (session,) = _shown(notebook, "text/html")
    assert re.search(r"<th[^>]*>device</th><td[^>]*>ipu_model: 1 x ipu2 IPU, 1472 tiles", session)
    assert len(_shown(notebook, "image/png")) == 1  # the training curve


def test_poptorch_port(kernel: str, data: Path, tmp_path: Path,
                       monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("ipywidgets")
    notebook = _run("poptorch_port.ipynb", kernel, data, tmp_path, monkeypatch)
    accuracy = float(re.search(r"Eval accuracy: ([\d.]+)%", text_of(notebook)).group(1))
    assert 0 <= accuracy <= 100
    widgets = _shown(notebook, "application/vnd.jupyter.widget-view+json")
    assert widgets, "xlgraph's compilation bar is a notebook widget in the kernel"


@pytest.mark.skipif(shutil.which("dot") is None, reason="needs Graphviz (apt-get install graphviz)")
def test_ipu_model_report(kernel: str, data: Path, tmp_path: Path,
                          monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("plotly")
    notebook = _run("ipu_model_report.ipynb", kernel, data, tmp_path, monkeypatch)
    assert "IPU model report: 1 x ipu2 IPU, 1472 tiles" in text_of(notebook)
    assert len(_shown(notebook, "image/svg+xml")) == 1
    session, report = _shown(notebook, "text/html")
    assert "<caption>Session of Ir" in session
    assert report.startswith('<iframe srcdoc="&lt;!DOCTYPE html&gt;')
    for view in ("view-tiles", "view-liveness", "view-operations"):
        assert f"id=&quot;{view}&quot;" in report
