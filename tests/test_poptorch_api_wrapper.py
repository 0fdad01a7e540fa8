"""PopTorch programs for the wrapper's methods, its random state, the ipu_model, the
asynchronous loaders, the compilation bar and the remaining options, written as a PopTorch user
writes them and run against torch eager (tests/test_poptorch_api_programs.py has the ops,
options and optimisers)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import xlgraph.poptorch as poptorch  # noqa: E402
from tests.test_poptorch_api_programs import Regression  # noqa: E402
from xlgraph.errors import ExecutionError  # noqa: E402
from xlgraph.ipu import ProfileReport  # noqa: E402


# -- the wrapper --------------------------------------------------------------------------------
def test_wrapper_methods_follow_poptorch(tmp_path):
    torch.manual_seed(10)
    net = Regression()
    opts = poptorch.Options().logCycleCount(True).enableProfiling(str(tmp_path))
    opts.anchorTensor("weight", "model.fc.weight")
    opts.anchorTensor("updated", "UpdatedVar___fc.bias")
    calls = []
    handle = poptorch.registerPostCompileHook(lambda: calls.append("compiled"))
    model = poptorch.trainingModel(net, opts)
    x, y = torch.randn(2, 4), torch.randn(2, 1)
    model.compile(x, y)
    handle.remove()
    assert calls == ["compiled"] and model.isCompiled() and model.compilationTime() > 0
    assert model.cycleCount() > 0  # the ipu_model's estimate of one call
    report = json.loads((tmp_path / "profile.json").read_text())
    assert report["time"]["cycles_per_run"] == pytest.approx(model.cycleCount(), abs=1)
    model(x, y)
    assert "fc.weight" in model.getTensorNames()
    torch.testing.assert_close(model.getAnchoredTensor("weight"), net.fc.weight.detach())
    torch.testing.assert_close(model.getAnchoredTensor("updated"), net.fc.bias.detach())
    model.detachFromDevice()
    assert not model.isAttachedToDevice()
    saved = ProfileReport.load(tmp_path / "profile.json")  # rewritten with the calls' host time
    assert saved.host_side_s_per_run > 0 and saved.model.tiles == 1472
    model.attachToDevice()
    model.copyWeightsToHostIfNeeded()
    state = {k: v + 1 for k, v in net.state_dict().items()}
    model.load_state_dict(state)
    torch.testing.assert_close(model.getAnchoredTensor("weight"), state["fc.weight"])
    assert model.model is net and model.getLatency() == ((0.0, 0.0, 0.0),) * 3


def test_rng_state_round_trips_and_replicas_draw_their_own_masks():
    class Drop(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(64, 64)
            self.drop = nn.Dropout(0.5)

        def forward(self, x):
            out = self.drop(self.fc(x))
            return out, poptorch.identity_loss(out.sum() * 0.0, reduction="sum")

    opts = poptorch.Options().replicationFactor(2).randomSeed(3)
    opts.outputMode(poptorch.OutputMode.All)
    model = poptorch.trainingModel(Drop(), opts)
    out, _ = model(torch.ones(2, 64))
    masks = (out == 0).view(2, 64)
    assert not torch.equal(masks[0], masks[1])  # each replica its own mask
    state = model.rng_state
    again, _ = model(torch.ones(2, 64))
    model.rng_state = state
    replay, _ = model(torch.ones(2, 64))
    torch.testing.assert_close((again == 0), (replay == 0))


# -- the ipu_model ------------------------------------------------------------------------------
def test_use_ipu_model_models_a_whole_chip_and_the_seed_cnn_fits():
    from tests.test_poptorch_training import Network, WithLoss

    torch.manual_seed(0)
    model = poptorch.trainingModel(WithLoss(Network()), poptorch.Options().useIpuModel(True))
    model(torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,)))
    chip = model._compiled.session.device.model
    assert (chip.tiles_per_ipu, chip.num_ipus) == (1472, 1)
    script = ("import os, torch, xlgraph.poptorch as poptorch\n"
              "m = poptorch.inferenceModel(torch.nn.Linear(3, 2), "
              "poptorch.Options().useIpuModel(True))\n"
              "m(torch.ones(1, 3))\n"
              "print(m._compiled.session.device.model.tiles_per_ipu)\n")
    env = {**os.environ, "POPTORCH_SMALL_IPU_MODEL": "1"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, check=True)
    assert out.stdout.split()[-1] == "4"


# -- loading ------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", [poptorch.DataLoaderMode.Async,
                                  poptorch.DataLoaderMode.AsyncRebatched])
def test_async_loader_yields_the_sync_batches_in_order(mode):
    data = torch.arange(40.0).view(20, 2)
    opts = poptorch.Options().deviceIterations(2)
    sync = [b.clone() for b in poptorch.DataLoader(opts, data, batch_size=3)]
    loader = poptorch.DataLoader(opts, data, batch_size=3, mode=mode,
                                 async_options={"buffer_size": 2})
    for _ in range(2):  # two epochs
        batches = list(loader)
        assert len(batches) == len(sync) == 3
        for a, b in zip(batches, sync):
            torch.testing.assert_close(a, b)
    loader.terminate()


def test_asynchronous_data_accessor_loads_ahead_and_reraises(capfd):
    opts = poptorch.Options()
    accessor = poptorch.AsynchronousDataAccessor(
        poptorch.DataLoader(opts, torch.arange(8.0), batch_size=2), early_preload=True)
    assert [b.tolist() for b in accessor] == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 7.0]]
    assert len(list(accessor)) == 4  # load_indefinitely: the next epoch is ready
    accessor.terminate()

    class Broken(torch.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            raise KeyError(f"item {i} is missing")

    # the worker fails before its first batch: the constructor says so, the worker's
    # traceback above it
    with pytest.raises(poptorch.Error, match=r"^AsynchronousDataAccessor worker thread failed "
                                             r"to start \(Check above for details\)$"):
        poptorch.AsynchronousDataAccessor(torch.utils.data.DataLoader(Broken()))
    assert "KeyError: 'item 0 is missing'" in capfd.readouterr().err


# -- the compilation bar ------------------------------------------------------------------------
@pytest.mark.parametrize("show, env, shown", [(True, None, False), (False, "1", False),
                                              (True, "1", True), (True, "0", False)])
def test_compilation_bar_follows_tty_option_and_environment(show, env, shown, capfd,
                                                            monkeypatch):
    monkeypatch.delenv("XLGRAPH_PROGRESS", raising=False)
    if env is not None:
        monkeypatch.setenv("XLGRAPH_PROGRESS", env)
    opts = poptorch.Options().showCompilationProgressBar(show)
    poptorch.inferenceModel(torch.nn.Linear(2, 2), opts)(torch.ones(1, 2))
    out = capfd.readouterr()  # captured streams are pipes, not terminals
    assert ("Graph compilation" in out.out + out.err) == shown


def test_unknown_option_values_are_checked():
    with pytest.raises(AssertionError):
        poptorch.Options().deviceIterations(2.0)
    with pytest.raises(ValueError):
        poptorch.Options().TensorLocations.numIOTiles(7)
    with pytest.raises(ValueError):
        poptorch.Options().Distributed.configureProcessId(2, 2)
    np.testing.assert_equal(poptorch.Options().Precision.partials_type, torch.float32)


def test_anchored_gradients_follow_their_output_mode():
    torch.manual_seed(11)
    net = Regression()
    reference = copy.deepcopy(net)
    opts = poptorch.Options().deviceIterations(2)
    opts.Training.gradientAccumulation(3)
    opts.anchorTensor("grad_bias", "Gradient___model.fc.bias")
    opts.anchorTensor("grad_weights", "Gradient___fc.weight", poptorch.OutputMode.All)
    model = poptorch.trainingModel(net, opts, torch.optim.SGD(net.parameters(), lr=0.1))
    x, y = torch.randn(12, 4), torch.randn(12, 1)
    model(x, y)
    assert "Gradient___fc.bias" in model.getTensorNames()
    eager = torch.optim.SGD(reference.parameters(), lr=0.1)
    weight_grads = []
    for i in range(2):  # two steps of 3 micro-batches of 2
        eager.zero_grad()
        nn.functional.mse_loss(reference.fc(x[6 * i:6 * i + 6]), y[6 * i:6 * i + 6]).backward()
        weight_grads.append(reference.fc.weight.grad.clone())
        eager.step()
    torch.testing.assert_close(model.getAnchoredTensor("grad_bias"), reference.fc.bias.grad)
    torch.testing.assert_close(model.getAnchoredTensor("grad_weights"), torch.cat(weight_grads))


class Pair:
    """A user's argument type: two tensors and a setting."""

    def __init__(self, a, b, scale):
        self.a, self.b, self.scale = a, b, scale


class PairParser(poptorch.ICustomArgParser):
    def yieldTensors(self, struct):  # noqa: N802 - PopTorch's interface
        yield struct.a
        yield struct.b

    def reconstruct(self, original_structure, tensor_iterator):
        return Pair(next(tensor_iterator), next(tensor_iterator), original_structure.scale)


def test_custom_arg_parser_flattens_a_users_argument_type():
    poptorch.registerCustomArgParser(Pair, PairParser())

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, pair):
            return self.fc(pair.a) * pair.scale + pair.b

    net = Net()
    pair = Pair(torch.randn(2, 3), torch.randn(2, 3), 2.0)
    torch.testing.assert_close(poptorch.inferenceModel(net)(pair), net(pair).detach())
    with pytest.raises(TypeError, match="ICustomArgParser"):
        poptorch.registerCustomArgParser(Pair, object())


def test_floating_point_exceptions_stop_at_the_first_nan():
    class Net(nn.Module):
        def forward(self, x):
            return torch.log(x) * 2.0

    opts = poptorch.Options()
    opts.Precision.enableFloatingPointExceptions(True)
    x = -torch.ones(2, 3)
    torch.testing.assert_close(poptorch.inferenceModel(Net())(x).isnan(),
                               torch.ones(2, 3, dtype=torch.bool))  # off: NaN flows through
    with pytest.raises(ExecutionError, match="log.*holds nan"):
        poptorch.inferenceModel(Net(), opts)(x)


def test_optimizer_state_dict_carries_the_device_state_for_resuming(tmp_path):
    def train(net, opt, batches):
        model = poptorch.trainingModel(net, optimizer=opt)
        for x, y in batches:
            model(x, y)
        return model

    torch.manual_seed(12)
    batches = [(torch.randn(2, 4), torch.randn(2, 1)) for _ in range(3)]
    straight = Regression()
    resumed = copy.deepcopy(straight)
    train(straight, poptorch.optim.Adam(straight.parameters(), lr=0.05), batches)

    first = poptorch.optim.Adam(resumed.parameters(), lr=0.05)
    model = train(resumed, first, batches[:2])
    state = first.state_dict()
    assert first.has_state() and state["ipu_state"]["optimizer.step"] == 2
    torch.save({"model": resumed.state_dict(), "optimizer": state}, tmp_path / "ckpt.pt")
    model.destroy()

    restored = Regression()
    checkpoint = torch.load(tmp_path / "ckpt.pt")
    restored.load_state_dict(checkpoint["model"])
    second = poptorch.optim.Adam(restored.parameters(), lr=0.05)
    second.load_state_dict(checkpoint["optimizer"])
    train(restored, second, batches[2:])  # the moments and step count carry on
    torch.testing.assert_close(restored.fc.weight.detach(), straight.fc.weight.detach())
