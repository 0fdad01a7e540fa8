"""The addons tutorial programs (examples/addons), run as PopXL users run them: through the
``popxl`` / ``popxl_addons`` aliases, on the ipu_model, on a learnable synthetic MNIST subset
(CI never downloads MNIST; the full-data figures are in docs/addons.md)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from tests.test_example_mnist import synthetic_mnist
from xlgraph import popxl_compat

pytestmark = pytest.mark.usefixtures("unverified_data")  # synthetic IDX files

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "addons"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mnist")
    synthetic_mnist(root, n_train=2000, n_test=400)
    return root


@pytest.fixture
def tutorial():
    popxl_compat.install()
    sys.path.insert(0, str(EXAMPLES))
    loaded = []

    def load(name: str):
        loaded.append(name)
        return importlib.import_module(name)

    try:
        yield load
    finally:
        sys.path.remove(str(EXAMPLES))
        for name in [*loaded, "basic_concepts", "mnist_utils"]:
            sys.modules.pop(name, None)
        popxl_compat.uninstall()


@pytest.mark.parametrize("name", ["basic_concepts", "custom_optimizer"])
def test_tutorial_trains_above_90_percent(tutorial, data_dir, name):
    result = tutorial(name).main(["--datasets-dir", str(data_dir), "--limit-nbatches", "200",
                                  "--test-batch-size", "40"])
    assert result["accuracy"] > 90
