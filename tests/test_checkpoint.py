"""Saving and loading weights as .npz, and reloading a trained model into an inference Ir."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph
from xlgraph import TensorSpec, checkpoint, nn, ops, optim, training

F32 = xlgraph.float32


def mse(y, t):
    d = y - t
    return ops.mean(d * d)


def _trained(tmp_path):
    """Train a Linear model a few steps; save params and optimiser state; return both."""
    ir = xlgraph.Ir()
    step = training.build_train_step(ir, nn.Linear(3, 2), mse, optim.Adam(lr=0.1),
                                     inputs=[TensorSpec((4, 3), F32)],
                                     targets=[TensorSpec((4, 2), F32)], num_host_transfers=3,
                                     init_seed=0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 4, 3)).astype(np.float32)
    with xlgraph.Session(ir) as session:
        step.run(session, x, x[..., :2])
        path = tmp_path / "model.npz"
        checkpoint.save(path, session)
        values = {v.name: session.get_tensor_data(v) for v in ir.main_graph.variables}
    return path, values


def test_round_trip_keeps_every_variable(tmp_path):
    path, values = _trained(tmp_path)
    loaded = checkpoint.load(path)
    assert sorted(loaded) == sorted(values)
    assert "adam.exp_avg.weight" in loaded and "weight" in loaded
    for name, arr in values.items():
        assert loaded[name].dtype == arr.dtype
        np.testing.assert_array_equal(loaded[name], arr)


def test_reload_into_an_inference_ir(tmp_path):
    path, values = _trained(tmp_path)
    model = nn.Linear(3, 2)
    ir = xlgraph.Ir()
    infer = training.build_inference(ir, model, [TensorSpec((5, 3), F32)], init_seed=99)
    session = xlgraph.Session(ir)
    loaded = checkpoint.load_into(session, path)  # optimiser entries are ignored
    assert sorted(loaded) == ["bias", "weight"]
    x = np.random.default_rng(1).normal(size=(5, 3)).astype(np.float32)
    with session:
        (y,) = infer.run(session, x)
    np.testing.assert_allclose(y, x @ values["weight"].T + values["bias"], rtol=1e-6)


def test_save_selected_variables_by_mapping(tmp_path):
    ir = xlgraph.Ir()
    with ir.main_graph:
        a = xlgraph.variable(np.arange(3, dtype=np.float32), name="a")
        xlgraph.variable(np.ones(2, np.int32), name="b")
    with xlgraph.Session(ir) as session:
        checkpoint.save(tmp_path / "a.npz", session, {"renamed": a})
        checkpoint.save(tmp_path / "list.npz", session, [a])
        checkpoint.save(tmp_path / "arrays.npz", {"w": np.full(2, 7, np.int32)})
    assert list(checkpoint.load(tmp_path / "a.npz")) == ["renamed"]
    assert list(checkpoint.load(tmp_path / "list.npz")) == ["a"]
    np.testing.assert_array_equal(checkpoint.load(tmp_path / "arrays.npz")["w"], [7, 7])


def test_missing_and_mismatched_entries(tmp_path):
    ir = xlgraph.Ir()
    with ir.main_graph:
        xlgraph.variable(np.zeros(3, np.float32), name="a")
        xlgraph.variable(np.zeros(2, np.float32), name="b")
    session = xlgraph.Session(ir)
    with pytest.raises(KeyError, match="'b'"):
        checkpoint.load_into(session, {"a": np.ones(3, np.float32)})
    assert checkpoint.load_into(session, {"a": np.ones(3)}, strict=False) == ["a"]
    np.testing.assert_array_equal(session.get_tensor_data(ir.main_graph.get_tensor("a")),
                                  np.ones(3, np.float32))
    with pytest.raises(ValueError, match="shape"):
        checkpoint.load_into(session, {"a": np.ones(4), "b": np.ones(2)})
