"""A PopTorch model compiles without torch's warnings about its own internals in the user's log."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

import xlgraph.poptorch as poptorch  # noqa: E402


def test_compiling_prints_no_torch_internal_warnings():
    model = poptorch.inferenceModel(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert model(torch.randn(2, 4)).shape == (2, 3)
    messages = [str(w.message) for w in caught]
    assert not [m for m in messages if "LeafSpec" in m or "TF32 acceleration" in m], messages
