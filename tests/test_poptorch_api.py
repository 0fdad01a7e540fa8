"""PopTorch API semantics: options, output modes, the DataLoader, weight sync and errors."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import xlgraph.poptorch as poptorch  # noqa: E402


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)
        self.loss = nn.CrossEntropyLoss()

    def forward(self, x, labels=None):
        out = self.fc(x)
        if labels is None:
            return out
        return out, self.loss(out, labels)


def _data(n: int = 24):
    torch.manual_seed(3)
    return torch.randn(n, 6), torch.randint(0, 3, (n,))


def _train(mode, period=None, iterations=4, accumulation=1):
    torch.manual_seed(0)
    model = Small()
    opts = poptorch.Options().deviceIterations(iterations)
    if mode is not None:
        opts.outputMode(mode, period)
    opts.Training.gradientAccumulation(accumulation)
    training = poptorch.trainingModel(model, opts, torch.optim.SGD(model.parameters(), 0.1))
    return training(*_data(2 * iterations * accumulation))


def test_output_modes_shape_and_select_micro_batches():
    preds_all, loss_all = _train(poptorch.OutputMode.All)
    assert preds_all.shape == (8, 3) and loss_all.shape == (4,)
    preds, loss = _train(None)  # Default is Final in training
    assert preds.shape == (2, 3) and loss.shape == ()
    torch.testing.assert_close(loss, loss_all[-1])
    torch.testing.assert_close(preds, preds_all[-2:])
    preds, loss = _train(poptorch.OutputMode.Sum)
    torch.testing.assert_close(loss, loss_all.sum())
    torch.testing.assert_close(preds, preds_all.view(4, 2, 3).sum(0))
    preds, loss = _train(poptorch.OutputMode.EveryN, 2)
    torch.testing.assert_close(loss, loss_all[1::2])
    torch.testing.assert_close(preds, preds_all.view(4, 2, 3)[1::2].reshape(4, 3))
    _, loss = _train(poptorch.AnchorMode.All, iterations=2, accumulation=3)
    assert loss.shape == (6,)


def test_inference_returns_every_micro_batch_by_default():
    model = Small()
    x, _ = _data()
    out = poptorch.inferenceModel(model, poptorch.Options().deviceIterations(3))(x)
    torch.testing.assert_close(out, model(x).detach())


def test_options_chain_freeze_and_check_types():
    opts = poptorch.Options().deviceIterations(20).replicationFactor(1).randomSeed(123) \
        .useIpuModel(True)
    assert (opts.device_iterations, opts.random_seed, opts.use_ipu_model) == (20, 123, True)
    with pytest.raises(AssertionError):
        poptorch.Options().deviceIterations(2.0)
    with pytest.raises(AssertionError):
        poptorch.Options().outputMode(poptorch.OutputMode.EveryN)
    poptorch.DataLoader(opts, list(range(10)))
    with pytest.raises(AttributeError, match="frozen"):
        opts.deviceIterations(2)
    with pytest.raises(AttributeError, match="frozen"):
        opts.Training.gradientAccumulation(2)
    clone = opts.clone()
    assert clone.deviceIterations(2).device_iterations == 2


def test_inference_accumulation_is_refused():
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(2)
    with pytest.raises(poptorch.Error, match="gradientAccumulation"):
        poptorch.inferenceModel(Small(), opts)


def test_dataloader_batch_arithmetic():
    opts = poptorch.Options().deviceIterations(5)
    opts.Training.gradientAccumulation(2)
    dataset = torch.utils.data.TensorDataset(torch.arange(205.0), torch.arange(205))
    loader = poptorch.DataLoader(opts, dataset, batch_size=4, shuffle=True)
    assert loader.combinedBatchSize == 40 and len(loader) == 5  # drop_last by default
    batches = list(loader)
    assert all(x.shape == (40,) for x, _ in batches)
    seen = torch.cat([x for x, _ in batches])
    assert len(set(seen.tolist())) == 200


def test_wrong_batch_sizes_are_refused():
    net = Small()
    model = poptorch.inferenceModel(net, poptorch.Options().deviceIterations(4))
    with pytest.raises(poptorch.Error, match="Invalid batch dimension"):
        model(torch.randn(6, 6))
    model(torch.randn(8, 6))
    x = torch.randn(12, 6)  # PopTorch runs only the compiled shapes, until destroy()
    with pytest.raises(poptorch.Error, match=r"Shape mismatch for x: expected torch.Size\(\[8, "
                                             r"6\]\) but got torch.Size\(\[12, 6\]\)\.\n.*"
                                             r"destroy\(\)"):
        model(x)
    model.destroy()
    torch.testing.assert_close(model(x), net(x), rtol=1e-5, atol=1e-5)


def test_batch_checks_hold_under_python_optimise():
    """The checks are real checks: ``python -O`` (which drops asserts) keeps them."""
    code = ("import torch, xlgraph.poptorch as poptorch\n"
            "m = poptorch.inferenceModel(torch.nn.Linear(6, 2), poptorch.Options()"
            ".deviceIterations(4))\n"
            "for call in (lambda: m(torch.randn(6, 6)), lambda: poptorch.DataLoader(None, [])):\n"
            "    try:\n        call()\n    except (poptorch.Error, TypeError) as e:\n"
            "        print(type(e).__name__, e)\n")
    result = subprocess.run([sys.executable, "-O", "-c", code], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    lines = result.stdout.splitlines()
    assert len(lines) == 2, result.stderr
    assert lines[0].startswith("BatchDimensionError Invalid batch dimension")
    assert lines[1].startswith("TypeError poptorch.DataLoader needs a poptorch.Options")


def test_weights_sync_to_the_torch_module_and_back(tmp_path):
    model = Small()
    x, y = _data(8)
    before = model.fc.weight.detach().clone()
    training = poptorch.trainingModel(model, optimizer=torch.optim.SGD(model.parameters(), 1.0))
    training(x, y)
    assert isinstance(model, Small)
    trained = model.state_dict()["fc.weight"].clone()
    assert not torch.allclose(trained, before)
    torch.testing.assert_close(model.fc.weight.detach(), trained)
    training(x, y)
    # a new inference model of the same module sees the latest training step
    inference = poptorch.inferenceModel(model)
    latest = inference(x)
    torch.testing.assert_close(latest, model.fc(x).detach())
    torch.save(model, tmp_path / "whole.pth")  # the whole module pickles as a plain Small
    whole = torch.load(tmp_path / "whole.pth", weights_only=False)
    assert type(whole) is Small
    torch.testing.assert_close(whole.fc.weight, model.fc.weight)
    torch.save(model.state_dict(), tmp_path / "w.pth")
    assert not torch.allclose(torch.load(tmp_path / "w.pth")["fc.weight"], trained)
    # the wrapper's load_state_dict writes the module and, attached, the device
    inference.load_state_dict({"fc.weight": before, "fc.bias": torch.zeros(3)})
    torch.testing.assert_close(inference(x), x @ before.T)
    training(x, y)
    model.load_state_dict({"fc.weight": before, "fc.bias": torch.zeros(3)})
    training.copyWeightsToHost()
    torch.testing.assert_close(model.fc.weight.detach(), before)  # the host write wins
    # detach, edit on the host, attach
    training.detachFromDevice()
    assert not training.isAttachedToDevice()
    with torch.no_grad():
        model.fc.bias.fill_(0.5)
    training.attachToDevice()
    out, _ = training(x, y)
    torch.testing.assert_close(out, (x @ before.T + 0.5))
    training.destroy()
    assert type(model) is Small
    poptorch.trainingModel(model)  # wrapping again after destroy() is allowed
    with pytest.raises(RuntimeError, match=r"Call model.destroy\(\) on the model to unwrap before "
                                           "wrapping again"):
        poptorch.trainingModel(model)


def test_copy_weights_needs_a_compiled_model():
    with pytest.raises(poptorch.Error, match="not been compiled"):
        poptorch.inferenceModel(Small()).copyWeightsToHost()


class UsesUnsupported(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = nn.Sequential(nn.Linear(6, 9))

    def forward(self, x):
        y = self.block(x).view(-1, 3, 3)
        z = torch.sin(y).sum()
        return torch.linalg.det(y) + torch.histc(y, bins=4).sum() + z


def test_unsupported_ops_are_listed_in_one_pass_with_their_lines():
    with pytest.raises(poptorch.UnsupportedOpError) as info:
        poptorch.inferenceModel(UsesUnsupported())(torch.randn(2, 6))
    message = str(info.value)
    assert "2 operation(s)" in message and "docs/poptorch-support.md" in message
    assert "aten.histc.default" in message and "det" in message and "aten.sin" not in message
    assert message.count("test_poptorch_api.py") == 2
    assert "return torch.linalg.det(y) + torch.histc(y, bins=4).sum() + z" in message
    assert len(message) < 1000


def test_loss_identification():
    class NoLoss(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(6, 3)

        def forward(self, x):
            return self.fc(x).sum()

    with pytest.raises(poptorch.Error.__mro__[1], match="Couldn't find a loss"):
        poptorch.trainingModel(NoLoss())(torch.randn(2, 6))

    class TwoLosses(Small):
        def forward(self, x, labels):
            out = self.fc(x)
            return out, self.loss(out, labels) + nn.functional.mse_loss(out, out * 0)

    with pytest.raises(poptorch.Error.__mro__[1], match="Multiple independent losses"):
        poptorch.trainingModel(TwoLosses())(*_data(2))

    class Combined(Small):
        def forward(self, x, labels):
            out = self.fc(x)
            both = self.loss(out, labels) + nn.functional.mse_loss(out, out * 0)
            return out, poptorch.identity_loss(both, reduction="mean")

    out, loss = poptorch.trainingModel(Combined())(*_data(2))
    assert loss.shape == ()


def test_import_without_torch_names_the_extra():
    code = ("import sys; sys.modules['torch'] = None\n"
            "try:\n    import xlgraph.poptorch\nexcept ImportError as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert "xlgraph[torch]" in out and len(out.strip().splitlines()) == 1


def test_replicas_average_gradients_like_one_step_on_the_concatenation():
    torch.manual_seed(0)
    model = Small()
    reference = copy.deepcopy(model)
    opts = poptorch.Options().deviceIterations(2).replicationFactor(2)
    training = poptorch.trainingModel(model, opts, torch.optim.SGD(model.parameters(), 0.5))
    x, y = _data(12)  # 2 iterations x 2 replicas x batch 3
    preds, losses = training(x, y)
    assert preds.shape == (6, 3) and losses.shape == (2,)  # Final: one micro-batch per replica
    opt = torch.optim.SGD(reference.parameters(), 0.5)
    for rows in (slice(0, 6), slice(6, 12)):
        opt.zero_grad()
        out, loss = reference(x[rows], y[rows])
        loss.backward()
        opt.step()
    torch.testing.assert_close(preds, out.detach(), rtol=1e-5, atol=1e-5)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-5, atol=1e-6)
    inference = poptorch.inferenceModel(model, poptorch.Options().replicationFactor(2))
    torch.testing.assert_close(inference(x[:4]), model(x[:4]).detach())
