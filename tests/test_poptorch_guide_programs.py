"""The programs of PopTorch's user guide and examples (``tests/poptorch_programs/``), each run as
a script and checked against the same model in torch eager: options read from a file (the
execution strategy included), blocks placed by ``ShardedExecution``'s stages, constants and
buffers changed in ``forward``, training and inference models, custom losses, pipelining
annotations and strategies (pipelined, phased), PopTorch's own ops, half precision, overlapping
IO and tensor locations, checkpoints, the LSTM and adder examples, debugging with anchored
tensors, and the DataLoader's batching."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
poptorch = pytest.importorskip("xlgraph.poptorch")

PROGRAMS = Path(__file__).resolve().parent / "poptorch_programs"


def _run(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.chdir(tmp_path)
    return runpy.run_path(str(PROGRAMS / name), run_name="__main__")


def test_options_file_sets_the_execution_strategy_and_the_rest(tmp_path, monkeypatch):
    scope = _run("options_file.py", tmp_path, monkeypatch)
    opts = scope["opts"]
    assert opts.device_iterations == 2 and opts.random_seed == 42
    assert isinstance(opts.execution_strategy, poptorch.ShardedExecution)
    assert opts.output_mode == poptorch.OutputMode.All
    torch.testing.assert_close(scope["out"], scope["model"](scope["x"]).detach())


def test_sharded_stages_place_blocks_and_train_like_torch(tmp_path, monkeypatch):
    scope = _run("sharded_stages.py", tmp_path, monkeypatch)
    strategy = scope["strategy"]
    assert [s.blocks for s in strategy.stages] == [["A"], ["B"], ["C"]]
    assert strategy.stage("B") is strategy.stages[1] and strategy.stages[2]._ipu == 1
    losses = scope["losses"]
    assert losses[-1] < losses[0]
    model, x, labels = scope["model"], scope["x"], scope["labels"]
    torch.testing.assert_close(scope["probabilities"], model(x, labels)[0].detach())
    # the same 20 SGD steps in eager torch from the same start give the same loss
    torch.manual_seed(0)
    ref = type(model)()
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(20):
        opt.zero_grad()
        loss = ref(x, labels)[1]
        loss.backward()
        opt.step()
    assert abs(float(ref(x, labels)[1].detach()) - float(model(x, labels)[1].detach())) < 1e-4


@pytest.mark.parametrize("line,match", [
    ("__import__('os').system('true')", "the setter must be a name"),
    ("deviceIterations(open('x'))", "open is not a poptorch enum"),
    ("setExecutionStrategy(poptorch.ShardedExecution.__init__)", "no public"),
    ("_values.clear()", "unknown option setter"),
])
def test_options_files_are_read_as_data(tmp_path, line, match):
    path = tmp_path / "bad.conf"
    path.write_text(line + "\n")
    with pytest.raises(poptorch.ConfigFileError, match=match):
        poptorch.Options().loadFromFile(str(path))


def test_constants_changed_in_forward_stay_inside_the_call(tmp_path, monkeypatch):
    scope = _run("buffers.py", tmp_path, monkeypatch)
    assert [c.tolist() for c in scope["constant_counts"]] == [[1.0]] * 3
    assert [c.tolist() for c in scope["buffer_counts"]] == [[1.0], [2.0], [3.0]]
    constant = scope["constant_model"]
    # PopTorch traces forward once on the host: the attribute changed once, at compilation
    assert constant.i.tolist() == [1.0] and "i" not in dict(constant.named_buffers())
    buffers = scope["buffer_model"]
    buffers.copyWeightsToHost()
    assert buffers.i.tolist() == [3.0]


def _train(model, batches, lr, loss_of, momentum=0.0) -> list[float]:
    """Eager SGD: one step per batch (a list of micro-batches whose mean loss is stepped),
    returning the loss of each step's last micro-batch, as PopTorch's ``Final`` output does."""
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    losses = []
    for micro_batches in batches:
        opt.zero_grad()
        micro = [loss_of(model, *mb) for mb in micro_batches]
        (sum(micro) / len(micro)).backward()
        opt.step()
        losses.append(float(micro[-1].detach()))
    return losses


def _same_weights(got: torch.nn.Module, want: torch.nn.Module, **tol) -> None:
    for (k, g), (_, w) in zip(got.state_dict().items(), want.state_dict().items(), strict=True):
        torch.testing.assert_close(g, w, msg=k, **tol)


def _fresh(scope: dict, cls: str, seed: int, *args) -> torch.nn.Module:
    torch.manual_seed(seed)
    return scope[cls](*args)


def test_training_model_trains_like_torch_and_shares_weights(tmp_path, monkeypatch):
    s = _run("training_model.py", tmp_path, monkeypatch)
    ref = _fresh(s, "ExampleModelWithLoss", 0)
    losses = _train(ref, [[(s["input"], s["target"])]] * 200, 0.01, lambda m, x, t: m(x, t)[1])
    assert s["losses"] == pytest.approx(losses, rel=1e-4, abs=1e-6)
    _same_weights(s["model"], ref, rtol=1e-4, atol=1e-5)
    ref = _fresh(s, "ExampleModelWithLoss", 1)
    _train(ref, [[(s["input"], s["target"])]] * 5, 0.01, lambda m, x, t: m(x, t)[1])
    torch.testing.assert_close(s["trained_out"], ref.eval()(s["input"]).detach())


def test_inference_model_classifies_like_torch(tmp_path, monkeypatch):
    s = _run("inference_model.py", tmp_path, monkeypatch)
    native = s["native_out"].detach()
    torch.testing.assert_close(s["out_tensor"], native, rtol=1e-4, atol=1e-5)
    assert s["top_five_classes"][1].tolist() == s["native_top_five_classes"][1].tolist()


def test_pipeline_simple_places_four_blocks_and_computes_like_torch(tmp_path, monkeypatch):
    s = _run("pipeline_simple.py", tmp_path, monkeypatch)
    torch.testing.assert_close(s["out"], s["model"](s["x"]).detach())
    assert sorted(s["poptorch_model"].blocks.values()) == [0, 1, 2, 3]


def test_phased_strategies_place_phases_and_train_like_torch(tmp_path, monkeypatch):
    s = _run("phased_execution.py", tmp_path, monkeypatch)
    ref = _fresh(s, "Model", 0)
    losses = _train(ref, [[(s["x"], s["target"])]] * 10, 0.05, lambda m, x, t: m(x, t)[1])
    for name in ("serial", "parallel"):
        assert s["losses"][name] == pytest.approx(losses, rel=1e-5), name
        _same_weights(s["models"][name], ref, rtol=1e-5, atol=1e-6)
    parallel = s["parallel_strategy"]()
    assert [[st._ipu for st in parallel.phase(i).stages] for i in range(3)] == \
        [[0, 2], [1, 3], [0, 2]]
    serial = s["serial_strategy"]()
    assert serial.liveness == poptorch.Liveness.OffChipAfterEachPhase
    assert serial.useSeparateBackwardPhase() is serial and serial.separate_backward_phase
    with pytest.raises(ValueError, match="phase 3 asked for, the strategy has 3"):
        parallel.phase(3)


def test_custom_losses_train_like_torch(tmp_path, monkeypatch):
    s = _run("custom_loss.py", tmp_path, monkeypatch)
    mse = torch.nn.functional.mse_loss
    for cls, loss_fn in (
            ("ExampleModelWithCustomLoss", lambda out, t: ((out - t) ** 2 * 5).mean()),
            ("ExampleModelWithTwoLosses",
             lambda out, t: torch.nn.functional.l1_loss(out, t) + mse(out, t))):
        ref = _fresh(s, cls, 0)
        losses = _train(ref, [[(s["input"], s["target"])]] * 10, 0.5,
                        lambda m, x, t, f=loss_fn: f(m.model(x), t))
        assert s["losses"][cls] == pytest.approx(losses, rel=1e-5), cls
        _same_weights(s["models"][cls], ref, rtol=1e-5, atol=1e-6)


def test_debugging_prints_and_reads_anchored_tensors(tmp_path, monkeypatch, capfd):
    s = _run("debugging.py", tmp_path, monkeypatch)
    assert "fc2 output: ((" in capfd.readouterr().err        # printed as the model runs
    assert {"Gradient___fc2.bias", "UpdatedVar___fc2.weight"} <= set(s["tensor_names"])
    ref = _fresh(s, "Model", 0)
    loss = ref(s["input"], s["label"])
    loss.backward()
    torch.testing.assert_close(s["grad"], ref.fc2.bias.grad)
    torch.testing.assert_close(s["update"], (ref.fc2.weight - 0.01 * ref.fc2.weight.grad).detach())


def test_annotations_and_pipelined_stages_train_like_torch(tmp_path, monkeypatch):
    s = _run("annotations.py", tmp_path, monkeypatch)
    x, labels = s["x"], s["labels"]
    steps = [[(x[i:i + 3], labels[i:i + 3]) for i in range(0, 24, 3)]] * 5
    ref = _fresh(s, "Network", 0)
    losses = _train(ref, steps, 0.1, lambda m, x, t: m(x, t)[1])
    for name in ("stages", "ids", "auto"):
        assert s["losses"][name] == pytest.approx(losses, rel=1e-5), name
        _same_weights(s["models"][name], ref, rtol=1e-5, atol=1e-6)
    assert [st.blocks for st in s["strategies"]["ids"].stages] == [["A"], ["B", "C"], ["D"]]


def test_poptorch_ops_compute_and_train_like_torch(tmp_path, monkeypatch):
    s = _run("ops.py", tmp_path, monkeypatch)
    torch.testing.assert_close(s["out"], s["model"](s["x"]).detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(s["ipu_or_host"], s["x"] * 2.0)
    torch.testing.assert_close(s["IpuOrHost"]()(s["x"]), s["x"] * 3.0)
    ref = s["TrainingNetwork"]()
    ref.load_state_dict(s["initial"])
    losses = _train(ref, [[(s["x"], s["labels"])]] * 3, 0.1, lambda m, x, t: m(x, t)[1])
    assert s["losses"] == pytest.approx(losses, rel=1e-5)


def test_half_models_run_and_train_in_float16_like_torch(tmp_path, monkeypatch):
    s = _run("precision.py", tmp_path, monkeypatch)
    assert s["out"].dtype == torch.float16
    torch.testing.assert_close(s["out"], s["model"](s["x"]).detach(), rtol=1e-2, atol=2e-3)
    ref = s["Model"]().half()
    ref.load_state_dict(s["initial"])
    losses = _train(ref, [[(s["x"], s["target"])]] * 5, 0.05, lambda m, x, t: m(x, t)[1])
    assert all(loss.dtype == torch.float16 for loss in s["losses"])
    assert [float(loss) for loss in s["losses"]] == pytest.approx(losses, rel=5e-3)


def test_overlapping_io_and_tensor_locations_train_like_torch(tmp_path, monkeypatch):
    s = _run("overlapping_io.py", tmp_path, monkeypatch)
    x, target = s["x"], s["target"]
    ref = s["Model"]()
    ref.load_state_dict(s["initial"])
    outs = []
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for i in range(0, 8, 2):                     # one SGD step per device iteration
        opt.zero_grad()
        out, loss = ref(x[i:i + 2], target[i:i + 2])
        outs.append((out.detach(), float(loss.detach())))
        loss.backward()
        opt.step()
    torch.testing.assert_close(s["out"], torch.cat([o for o, _ in outs]))
    assert s["losses"].tolist() == pytest.approx([v for _, v in outs], rel=1e-5)
    assert s["opts"].TensorLocations.num_io_tiles == 32


def test_checkpoints_resume_where_training_stopped(tmp_path, monkeypatch):
    s = _run("checkpoints.py", tmp_path, monkeypatch)
    x, labels = s["x"], s["labels"]
    ref = _fresh(s, "Classifier", 0)
    losses = _train(ref, [[(x, labels)]] * 6, 0.1, lambda m, x, t: m(x, t)[1], momentum=0.9)
    assert s["resumed_losses"] == pytest.approx(losses[3:], rel=1e-5)
    assert s["continued_losses"] == pytest.approx(losses[3:], rel=1e-5)
    _same_weights(s["resumed"], ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(s["model"].fc1.weight, ref.fc1.weight, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(s["after"] - s["before"], torch.ones_like(s["before"]))
    torch.testing.assert_close(s["after"], ref.eval()(x).detach() + 1.0, rtol=1e-5, atol=1e-5)


def test_lstm_example_feeds_its_hidden_state_back_like_torch(tmp_path, monkeypatch):
    s = _run("lstm.py", tmp_path, monkeypatch)
    hidden = s["initial_hidden"]
    for i, got in zip(s["inputs"], s["outputs"], strict=True):
        want, hidden = s["model"](i.view(1, 1, -1), hidden)
        torch.testing.assert_close(got, want.detach(), rtol=1e-5, atol=1e-6)
    for got, want in zip(s["hidden"], hidden, strict=True):
        torch.testing.assert_close(got, want.detach(), rtol=1e-5, atol=1e-6)


def test_simple_adder_example_adds(tmp_path, monkeypatch, capfd):
    s = _run("simple_adder.py", tmp_path, monkeypatch)
    assert "Success" in capfd.readouterr().out
    with pytest.raises(poptorch.Error, match="Shape mismatch for x"):  # compiled for [1]
        s["inference_model"](torch.ones(3), torch.ones(3))
    y = torch.randn(3)
    torch.testing.assert_close(poptorch.inferenceModel(s["model"])(torch.ones(3), y), y + 1)


def test_batching_combines_iterations_replicas_and_accumulation_like_torch(tmp_path, monkeypatch):
    s = _run("batching.py", tmp_path, monkeypatch)
    assert s["training_data"].combinedBatchSize == 2 * 2 * 2 * 3
    assert len(s["training_data"]) == len(s["batches"]) == 100 // 24
    assert len(s["async_batches"]) == len(s["batches"])
    for (got_x, got_y), (want_x, want_y) in zip(s["async_batches"], s["batches"], strict=True):
        assert torch.equal(got_x, want_x) and torch.equal(got_y, want_y)
    ref = s["ExampleModelWithLoss"]([3, 2], 2)
    ref.load_state_dict(s["initial"])
    # each call: 2 device iterations, each one SGD step over 2 replicas x 3 micro-batches x 2
    steps = [[(data[i:i + 12], labels[i:i + 12])] for data, labels in s["batches"]
             for i in (0, 12)]
    _train(ref, steps, 0.5, lambda m, x, t: m(x, t)[1])
    _same_weights(s["model"], ref, rtol=1e-5, atol=1e-6)
    assert all(loss.shape == (2,) for loss in s["losses"])   # Final: one loss per replica
    data = torch.stack([d for d, _ in s["dataset"]])
    labels = torch.tensor([label for _, label in s["dataset"]])
    assert s["correct"] == int((ref.eval()(data).argmax(1) == labels).sum())


def test_precompilation_exports_loads_and_trains_like_torch(tmp_path, monkeypatch):
    s = _run("precompilation.py", tmp_path, monkeypatch)
    x, target = s["input"], s["target"]
    ref = _fresh(s, "ExampleModelWithLoss", 0)
    # 3 calls of 2 device iterations, each an SGD step on 2 rows; Final: the 2nd step's loss
    losses = _train(ref, [[(x[:2], target[:2])], [(x[2:], target[2:])]] * 3, 0.1,
                    lambda m, x, t: m(x, t)[1], momentum=0.5)
    assert s["loaded_losses"] == pytest.approx(losses[1::2], rel=1e-5)
    assert s["rebuilt_losses"] == pytest.approx(losses[1::2], rel=1e-5)
    assert s["poptorch_model"].isCompiled()


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        self.register_buffer("steps", torch.zeros(()))

    def forward(self, x):
        self.steps += 1
        return torch.relu(self.fc(x))


def test_saved_inference_model_loads_with_its_weights_and_options(tmp_path):
    torch.manual_seed(0)
    net = _Net()
    opts = poptorch.Options().deviceIterations(2).outputMode(poptorch.OutputMode.Final)
    model = poptorch.inferenceModel(net, opts)
    x = torch.randn(6, 4)
    with pytest.raises(poptorch.Error, match="not been compiled"):
        model.save(str(tmp_path / "m"))
    model(x)
    model.save(str(tmp_path / "m"))
    with torch.no_grad():
        net.fc.bias.add_(5.0)                     # the file keeps the weights at save()
    loaded = poptorch.load(str(tmp_path / "m"),
                           edit_opts_fn=lambda o: o.outputMode(poptorch.OutputMode.All))
    assert loaded.options.device_iterations == 2
    assert loaded.options.output_mode == poptorch.OutputMode.All
    torch.testing.assert_close(loaded(x), torch.relu(net.fc(x) - 5.0).detach())
    assert float(loaded.model.steps) == 2.0 + 2.0   # buffers too: 2 iterations before, 2 now


def test_executable_files_are_checked_and_never_unpickled(tmp_path):
    torch.manual_seed(0)
    x = torch.randn(2, 4)
    path = str(tmp_path / "exe")
    poptorch.inferenceModel(_Net()).compileAndExport(path, x, export_model=False)
    with pytest.raises(poptorch.Error, match="export_model=False: wrap the model again"):
        poptorch.load(path)
    with pytest.raises(poptorch.Error, match="holds an inferenceModel, this wrapper is a "
                                             "trainingModel"):
        poptorch.trainingModel(_Net()).loadExecutable(path)
    other = torch.nn.Sequential(torch.nn.Linear(4, 3))
    with pytest.raises(poptorch.Error, match="parameters differ from the exported ones"):
        poptorch.inferenceModel(other).loadExecutable(path)
    net = _Net()
    model = poptorch.inferenceModel(net)
    model.loadExecutable(path)                        # compiled for (2, 4) inputs
    torch.testing.assert_close(model(x), torch.relu(net.fc(x)).detach())
    with pytest.raises(poptorch.Error, match="already compiled"):
        model.loadExecutable(path)
    # a pickle in the archive is refused, not run
    import numpy as np
    evil = tmp_path / "evil.npz"
    np.savez(evil, meta=np.array([object()], dtype=object))
    with pytest.raises(poptorch.Error, match="not an executable exported by compileAndExport"):
        poptorch.load(str(evil))
    (tmp_path / "text").write_text("hello")
    with pytest.raises(poptorch.Error, match="not an executable exported by compileAndExport"):
        poptorch.load(str(tmp_path / "text"))


def test_malformed_executables_are_poptorch_errors(tmp_path):
    torch.manual_seed(0)
    path = str(tmp_path / "exe")
    poptorch.inferenceModel(_Net()).compileAndExport(path, torch.randn(2, 4))
    import json

    import numpy as np
    archive = dict(np.load(path))
    good = archive["meta"]
    meta = json.loads(bytes(good).decode())
    meta["inputs"]["x"]["tensor"] = [[-1, 4], "float32"]
    archive["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    with open(path, "wb") as f:
        np.savez(f, **archive)
    with pytest.raises(poptorch.Error, match="input 'x' has a bad shape or dtype"):
        poptorch.load(path)
    archive["meta"] = good
    del archive["graph"]
    with open(path, "wb") as f:
        np.savez(f, **archive)
    with pytest.raises(poptorch.Error, match="a malformed executable"):
        poptorch.load(path)


def _eager_group(w: torch.Tensor, rows: torch.Tensor, steps: int, lr: float) -> tuple:
    """One replica group in eager torch: SGD on the mean of its replicas' mean losses
    (equal micro-batches: the mean over the group's rows), and the outputs of each step."""
    w = torch.nn.Parameter(w.clone())
    opt = torch.optim.SGD([w], lr=lr)
    outs = []
    for _ in range(steps):
        opt.zero_grad()
        z = rows @ w
        outs.append(z.detach())
        (z ** 2).mean().backward()
        opt.step()
    return w.detach(), outs


def test_replica_grouped_weights_train_each_group_like_eager(tmp_path, monkeypatch):
    scope = _run("replica_grouped_weights.py", tmp_path, monkeypatch)
    w_init, x, trained = scope["W_init"], scope["X"], scope["trained_W"]
    assert trained.shape == (4, 2, 2)
    rows = x.view(8, 3, 2)  # one micro-batch per replica
    for group, replicas in enumerate(([0, 4], [1, 5], [2, 6], [3, 7])):  # Orthogonal, 2
        want, outs = _eager_group(w_init[group], rows[replicas].reshape(6, 2), 3, 0.05)
        torch.testing.assert_close(trained[group], want, rtol=1e-5, atol=1e-6)
        for step, z in enumerate(scope["outputs"]):  # OutputMode.All: every replica's rows
            torch.testing.assert_close(z.view(8, 3, 2)[replicas].reshape(6, 2), outs[step],
                                       rtol=1e-5, atol=1e-6)


def test_error_handling_catches_poptorch_errors_with_their_fields(tmp_path, monkeypatch, capfd):
    s = _run("error_handling.py", tmp_path, monkeypatch)
    assert s["success"] == "ok"
    error = s["failure"]
    assert type(error) is poptorch.Error and isinstance(error, RuntimeError)
    assert error.message == "Model has not been compiled or has been destroyed."
    line = next(i for i, text in enumerate(
        (PROGRAMS / "error_handling.py").read_text().splitlines(), 1)
        if "copyWeightsToDevice()" in text)
    assert error.location == f"error_handling.py:{line}"
    assert f"from component {error.type}, location: error_handling.py:{line}" in \
        capfd.readouterr().out
    assert issubclass(poptorch.RecoverableError, poptorch.Error)
    assert issubclass(poptorch.UnrecoverableError, poptorch.Error)
    assert poptorch.Error("x").location == ""        # not raised yet


def test_sum_output_mode_sums_every_micro_batch_loss_like_torch(tmp_path, monkeypatch):
    s = _run("sum_output_mode.py", tmp_path, monkeypatch)
    ref = s["ExampleModelWithLoss"]([3, 2], 2)
    ref.load_state_dict(s["initial"])
    opt = torch.optim.SGD(ref.parameters(), lr=0.2)
    want = []
    for data, labels in s["training_data"]:       # 20 rows: 5 steps of 2 micro-batches of 2
        total = 0.0
        for step in range(5):
            opt.zero_grad()
            micro = [ref(data[i:i + 2], labels[i:i + 2])[1] for i in (4 * step, 4 * step + 2)]
            total += float(sum(micro).detach())
            (sum(micro) / 2).backward()
            opt.step()
        want.append(total)
    assert [float(v) for v in s["call_losses"]] == pytest.approx(want, rel=1e-5)
    assert s["call_losses"][0].shape == () and s["output"].shape == (2, 2)
    _same_weights(s["model"], ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("tamper", [
    lambda g: g.replace("torch.ops.aten.relu.default", "torch.hub.load"),
    lambda g: g.replace("torch.ops.aten.relu.default", "torch.ops.load_library.a.b"),
    lambda g: g.replace('"guards_code": []', '"guards_code": ["__import__(\'os\')._exit(3)"]'),
    lambda g: g.replace('"range_constraints": {}', '"range_constraints": {"s0": {}}'),
])
def test_graphs_that_could_run_code_are_refused_before_torch_reads_them(tmp_path, tamper):
    import numpy as np
    path = str(tmp_path / "exe")
    poptorch.inferenceModel(_Net()).compileAndExport(path, torch.randn(2, 4))
    archive = dict(np.load(path))
    graph = bytes(archive["graph"]).decode()
    assert "torch.ops.aten.relu.default" in graph and '"guards_code": []' in graph
    archive["graph"] = np.frombuffer(tamper(graph).encode(), np.uint8)
    with open(path, "wb") as f:
        np.savez(f, **archive)
    with pytest.raises(poptorch.Error, match="a malformed executable.*(not a torch operator|"
                                             "guards or symbolic shapes)"):
        poptorch.load(path)
