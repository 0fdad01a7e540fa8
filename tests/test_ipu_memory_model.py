"""The ipu_model's memory answers, as a PopXL user meets them: what fits PopXL's 4-tile model
fits, and what does not fails naming the tensors that hold the memory."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import errors, ops
from xlgraph.ipu import IPUModel
from xlgraph.transforms import autodiff


def mlp_training_step(layers: int, width: int = 16, batch: int = 16):
    """One SGD step of a deep ReLU MLP, written as a PopXL program."""
    rng = np.random.default_rng(0)
    weights = [(np.eye(width) + rng.normal(0, 0.05, (width, width))).astype(np.float32)
               for _ in range(layers)]
    ir = popxl.Ir()
    with ir.main_graph:
        ws = [popxl.variable(w, name=f"w{i}") for i, w in enumerate(weights)]
        x_s = popxl.h2d_stream((batch, width), popxl.float32, "x")
        y_s = popxl.h2d_stream((batch,), popxl.int32, "y")

        def forward(x, *params):
            for w in params:
                x = ops.relu(ops.matmul(x, w))
            return x

        fwd = ir.create_graph(forward, x_s.spec, *[w.spec for w in ws])
        grad = autodiff(fwd, grads_required=fwd.inputs[1:])
        info = ops.call_with_info(fwd, ops.host_load(x_s), *ws)
        probs = ops.softmax(info.outputs[0], 1)
        loss, dlogits = ops.nll_loss_with_softmax_grad(probs, ops.host_load(y_s))
        grads = ops.call(grad.graph, dlogits, inputs_dict=grad.inputs_dict(info))
        for w, g in zip(ws, grads):
            ops.scaled_add_(w, g, b=-0.1)
        loss_s = popxl.d2h_stream((), popxl.float32, "loss")
        ops.host_store(loss_s, loss)
    return ir, ws, weights, x_s, y_s, loss_s


def _numpy_step(weights, x, y):
    acts = [x]
    for w in weights:
        acts.append(np.maximum(acts[-1] @ w, 0))
    z = acts[-1] - acts[-1].max(1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    loss = -np.log(p[np.arange(len(y)), y]).mean()
    d = p.copy()
    d[np.arange(len(y)), y] -= 1
    d /= len(y)
    new = list(weights)
    for i in reversed(range(len(weights))):
        d = d * (acts[i + 1] > 0)
        new[i] = weights[i] - 0.1 * acts[i].T @ d
        d = d @ weights[i].T
    return loss, new


def test_a_160_layer_mlp_training_step_fits_the_default_4_tiles() -> None:
    ir, ws, weights, x_s, y_s, loss_s = mlp_training_step(160)
    session = popxl.Session(ir, "ipu_model")  # PopXL's ipu_model: 4 tiles of 624 KiB
    assert session.device.model.tiles == 4
    memory = session.report().memory
    assert memory.peak.max() <= memory.model.memory_bytes_per_tile
    rng = np.random.default_rng(1)
    x = rng.normal(size=(16, 16)).astype(np.float32)
    y = rng.integers(0, 16, 16).astype(np.int32)
    with session:
        got = session.run({x_s: x, y_s: y})[loss_s]
    want_loss, want_weights = _numpy_step(weights, x, y)
    assert np.isfinite(want_loss) and want_loss > 0.1
    np.testing.assert_allclose(got, want_loss, rtol=1e-4)
    for v, want in zip(ws[::40], want_weights[::40]):
        np.testing.assert_allclose(session.get_tensor_data(v), want, rtol=1e-4, atol=1e-6)


def test_code_is_shared_per_vertex_type_and_state_is_per_vertex() -> None:
    def profile(relus: int, extra_kind: bool):
        ir = popxl.Ir()
        with ir.main_graph:
            x = popxl.variable(np.ones((16, 16), np.float32), name="x")
            for _ in range(relus):
                x = ops.relu(x)
            if extra_kind:
                x = ops.tanh(x)
            ops.host_store(popxl.d2h_stream(x.shape, x.dtype, "out"), x)
        return popxl.Session(ir, "ipu_model").report().memory.always_live

    model = IPUModel()
    one, many, other = profile(1, False), profile(41, False), profile(1, True)
    np.testing.assert_array_equal(one["code"], many["code"])  # one relu codelet per tile
    per_vertex = int(model.fact("bytes_per_vertex"))
    np.testing.assert_array_equal(many["vertex state"] - one["vertex state"], 40 * per_vertex)
    np.testing.assert_array_equal(other["code"] - one["code"],
                                  int(model.fact("code_bytes_per_vertex_type")))


def test_tensors_spread_over_every_tile_and_streams_stay_on_the_host() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.ones((16, 16), np.float32), name="w")
        x_s = popxl.h2d_stream((256, 256), popxl.float32, "x")  # 256 KiB a transfer
        ops.host_store(popxl.d2h_stream((16, 16), popxl.float32, "y"),
                       w + ops.sum(ops.host_load(x_s)))
    memory = popxl.Session(ir, "ipu_model").report().memory
    np.testing.assert_array_equal(memory.always_live["variables"], [256] * 4)  # 1 KiB / 4
    assert "streams" not in memory.always_live
    loaded = memory.curve.max(axis=0) - 65536  # the loaded value, while live: 64 KiB a tile
    assert ((loaded >= 0) & (loaded < 128)).all(), loaded


def test_a_4_mib_variable_is_refused_naming_it() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        table = popxl.variable(np.zeros((1024, 1024), np.float32), name="embedding_table")
        ops.host_store(popxl.d2h_stream((1024,), popxl.float32, "row"), table[0])
    with pytest.raises(errors.OutOfMemoryError) as info:
        popxl.Session(ir, "ipu_model")
    text = str(info.value)
    assert isinstance(info.value, MemoryError)
    assert "tile 0 needs" in text and "bytes over" not in text and " over (4 of 4 tiles" in text
    held = text.index("variables, optimizer state and constants there: embedding_table")
    assert "f32[1024,1024] (1,048,576 bytes here)" in text
    assert held < text.index("not-always-live")  # always-live holders come first
    capacity = IPUModel().memory_bytes_per_tile
    need = int(text.split("needs ")[1].split(" bytes")[0].replace(",", ""))
    assert f"{need - capacity:,} over" in text
    popxl.Session(ir, "ipu_model", ipu_model=IPUModel.full())  # a whole chip holds it


def test_end_to_end_estimate_adds_the_host_side_measured_between_runs() -> None:
    import time

    ir = popxl.Ir()
    with ir.main_graph:
        x_s = popxl.h2d_stream((64,), popxl.float32, "x")
        out = popxl.d2h_stream((64,), popxl.float32, "y")
        ops.host_store(out, ops.host_load(x_s) * 2.0)
    session = popxl.Session(ir, "ipu_model")
    assert session.report().host_side_s_per_run is None  # nothing measured before a run
    with session:
        started = time.perf_counter()
        for _ in range(5):
            time.sleep(0.01)  # the program's own host work between runs (a data loader)
            session.run({x_s: np.ones(64, np.float32)})
        elapsed = time.perf_counter() - started
    report = session.report()
    timing = session.host_timing
    assert timing.runs == 5 and timing.gaps == 4
    # each gap holds a 0.01 s sleep; the measured parts fit in the loop's own time (a bound
    # that holds however loaded the machine is)
    assert timing.between_runs_s >= 4 * 0.01 and timing.framework_s > 0
    assert timing.between_runs_s + timing.framework_s + timing.simulated_s <= elapsed
    assert report.host_side_s_per_run == pytest.approx(timing.between_runs_s / 4
                                                       + timing.framework_s / 5)
    split = report.end_to_end(runs=10)
    clock = report.model.tile_clock_frequency
    assert split["device"] == pytest.approx(10 * report.cycles.device_cycles / clock)
    assert split["host_link"] == pytest.approx(10 * report.cycles.host_cycles / clock)
    assert split["host_side"] == pytest.approx(10 * report.host_side_s_per_run)
    assert split["total"] == pytest.approx(sum(split[k] for k in
                                               ("host_side", "host_link", "device")))
    assert "End to end per run" in str(report) and "host side dominates" in str(report)
    assert report.to_dict()["time"]["host_side_seconds_per_run"] == report.host_side_s_per_run


def test_in_place_updates_need_no_second_copy_of_the_weight() -> None:
    """512 KiB of a 2 MiB weight on each of the 4 tiles, updated in place, fits: the IPU's
    vertices need no temporary of the weight's size (the simulator's numpy scratch is not
    device memory)."""
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.zeros((512, 1024), np.float32), name="w")
        ops.var_updates.accumulate_(w, popxl.constant(np.float32(1)), f=0.5)
    memory = popxl.Session(ir, "ipu_model").report().memory
    assert memory.peak.max() < memory.model.memory_bytes_per_tile
    np.testing.assert_array_equal(memory.always_live["variables"], [512 * 1024] * 4)
