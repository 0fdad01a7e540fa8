"""The addons tutorial programs (examples/addons), run as PopXL users run them: through the
``popxl`` / ``popxl_addons`` aliases, on the ipu_model, on a learnable synthetic MNIST subset
(CI never downloads MNIST; the full-data figures are in docs/addons.md)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
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
        for name in [*loaded, "basic_concepts", "mnist_utils"]:  # fresh for the next test
            sys.modules.pop(name, None)
        popxl_compat.uninstall()


@pytest.mark.parametrize("name", ["basic_concepts", "custom_optimizer"])
def test_tutorial_trains_above_90_percent(tutorial, data_dir, name):
    result = tutorial(name).main(["--datasets-dir", str(data_dir), "--limit-nbatches", "200",
                                  "--test-batch-size", "40"])
    assert result["accuracy"] > 90


def args(data_dir: Path, batches: int) -> list[str]:
    return ["--datasets-dir", str(data_dir), "--limit-nbatches", str(batches),
            "--test-batch-size", "40"]


def test_data_parallel_and_remote_rts_train_alike(tutorial, data_dir):
    """Tutorial 5 (sharded remote weights, reduce-scatter) computes what tutorial 3
    (replicated weights, all-reduce) does: the same losses on both replicas."""
    dp = tutorial("data_parallel").main(args(data_dir, 100))
    rts = tutorial("remote_rts").main(args(data_dir, 100))
    assert dp["accuracy"] > 50
    assert dp["last_losses"].shape == (2,)
    np.testing.assert_allclose(rts["last_losses"], dp["last_losses"], rtol=1e-4)
    assert rts["accuracy"] == pytest.approx(dp["accuracy"], abs=1.0)


def test_pipelining_and_phased_execution_train_alike(tutorial, data_dir):
    """Tutorial 4 (two pipeline stages on two IPUs) and tutorial 6 (two phases, batch
    serialised through remote buffers) both accumulate the mean gradient of 4 micro-batches:
    the same losses, micro-batch by micro-batch."""
    pipe = tutorial("pipelining").main(args(data_dir, 60))
    phased = tutorial("phased_execution").main(args(data_dir, 60))
    assert pipe["last_losses"].shape == (4,)
    np.testing.assert_allclose(phased["last_losses"], pipe["last_losses"], rtol=1e-4)
    assert pipe["accuracy"] > 50 and phased["accuracy"] > 50


def test_remote_rts_adam_matches_data_parallel_adam(tutorial, data_dir):
    """Tutorial 5's shape: Adam on weight shards, its moments sharded like them in remote
    memory and fed the reduce-scattered gradient, computes what tutorial 3's whole Adam step
    on all-reduced gradients does."""
    adam = [*args(data_dir, 3), "--optimizer", "adam", "--lr", "0.001"]
    dp = tutorial("data_parallel").main(adam)
    rts = tutorial("remote_rts").main(adam)
    assert rts["last_losses"].shape == (2,)
    np.testing.assert_allclose(rts["last_losses"], dp["last_losses"], rtol=1e-5)


def test_phased_execution_with_rts_matches_the_unsharded_replicas(tutorial, data_dir):
    """Tutorial 6's shape: weights sharded over the replica group each factory gives by
    default, gathered for each phase and updated from reduce-scattered gradients: the same
    losses as whole weights on both replicas."""
    two = [*args(data_dir, 8), "--replicas", "2"]
    whole = tutorial("phased_execution").main(two)
    sharded = tutorial("phased_execution").main([*two, "--rts"])
    assert whole["last_losses"].shape == (4, 2)
    np.testing.assert_allclose(sharded["last_losses"], whole["last_losses"], rtol=1e-5)
