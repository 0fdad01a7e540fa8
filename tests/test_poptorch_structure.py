"""Structured inputs and outputs and the small helpers of PopTorch's top level, as a PopTorch
user meets them: ``OrderedDict`` and custom classes (through ``ICustomArgParser``) in and out of
``forward``, ``isRunningOnIpu``/``isCompilingWithDispatcher`` inside ``forward``,
``module_repr`` and ``repr`` of wrapped modules, ``Options``' repr, and ``destroy``."""

from __future__ import annotations

import collections

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
poptorch = pytest.importorskip("xlgraph.poptorch")


class Pair:
    def __init__(self, first, second, tag="pair"):
        self.first, self.second, self.tag = first, second, tag


class PairParser(poptorch.ICustomArgParser):
    def yieldTensors(self, struct):  # noqa: N802
        yield struct.first
        yield struct.second

    def reconstruct(self, original_structure, tensor_iterator):
        return Pair(next(tensor_iterator), next(tensor_iterator), original_structure.tag)


poptorch.registerCustomArgParser(Pair, PairParser())


class Structured(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, batch, pair):
        y = self.fc(batch["x"]) + pair.first
        out = collections.OrderedDict(z=y * 2, w=pair.second - 1)
        return out, Pair(y.sum(1), pair.second * y[:, :1], pair.tag)


def test_ordered_dict_and_custom_class_inputs_and_outputs_match_torch():
    torch.manual_seed(0)
    net = Structured()
    model = poptorch.inferenceModel(net)
    for tag in ("first", "first", "second"):
        if tag == "second":  # a new tag (a non-tensor value) needs a new compilation
            with pytest.raises(poptorch.Error, match="Value mismatch for pair"):
                model(collections.OrderedDict(x=torch.randn(2, 3)),
                      Pair(torch.randn(2, 3), torch.randn(2, 3), tag))
            model.destroy()
        batch = collections.OrderedDict(x=torch.randn(2, 3))
        pair = Pair(torch.randn(2, 3), torch.randn(2, 3), tag)
        got_dict, got_pair = model(batch, pair)
        want_dict, want_pair = net(batch, pair)
        assert type(got_dict) is collections.OrderedDict and list(got_dict) == ["z", "w"]
        for key in want_dict:
            torch.testing.assert_close(got_dict[key], want_dict[key].detach())
        assert isinstance(got_pair, Pair) and got_pair.tag == tag
        torch.testing.assert_close(got_pair.first, want_pair.first.detach())
        torch.testing.assert_close(got_pair.second, want_pair.second.detach())


class Trained(Structured):
    def forward(self, batch, pair):
        out, res = super().forward(batch, pair)
        return res, nn.functional.mse_loss(out["z"], pair.second)


def test_custom_class_trains_like_torch():
    torch.manual_seed(0)
    net, ref = Trained(), Trained()
    ref.load_state_dict(net.state_dict())
    batch, pair = {"x": torch.randn(4, 3)}, Pair(torch.randn(4, 3), torch.randn(4, 3))
    model = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    res, loss = model(batch, pair)
    want, ref_loss = ref(batch, pair)
    torch.testing.assert_close(loss, ref_loss.detach())
    assert isinstance(res, Pair)
    ref_loss.backward()
    with torch.no_grad():
        for p in ref.parameters():
            p -= 0.1 * p.grad
    torch.testing.assert_close(net.fc.weight.detach(), ref.fc.weight.detach())


def test_forward_sees_it_runs_on_the_ipu_only_when_compiled():
    class Net(nn.Module):
        def forward(self, x):
            on_ipu = poptorch.isRunningOnIpu() and poptorch.isCompilingWithDispatcher()
            return x + 1 if on_ipu else x - 1

    x = torch.zeros(2)
    assert Net()(x).tolist() == [-1.0, -1.0]
    assert poptorch.inferenceModel(Net())(x).tolist() == [1.0, 1.0]
    assert not poptorch.isRunningOnIpu() and not poptorch.isCompilingWithDispatcher()


def test_module_repr_and_repr_are_the_users_after_wrapping_and_destroy():
    net = Trained()
    before = repr(net)
    model = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    assert poptorch.module_repr(net) == before == repr(net)
    assert "Poptorch" not in before and before.startswith("Trained(")
    model({"x": torch.randn(2, 3)}, Pair(torch.zeros(2, 3), torch.zeros(2, 3)))
    model.destroy()
    assert not model.isCompiled() and type(net) is Trained and repr(net) == before
    poptorch.trainingModel(net)  # unwrapped by destroy: wrapping again is allowed


def test_options_repr_lists_every_option_and_sub_object():
    opts = poptorch.Options().deviceIterations(3).randomSeed(7)
    opts.Training.gradientAccumulation(2)
    text = repr(opts)
    assert text.startswith("Options(device_iterations=3, replication_factor=1,")
    assert "random_seed=7" in text and "log_dir='.'" in text
    assert "Training=_TrainingOptions(gradient_accumulation=2," in text
    assert repr(opts.Precision).startswith("_PrecisionOptions(")


class Fitted(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 1)

    def forward(self, x, y):
        out = self.fc(x)
        return out, nn.functional.mse_loss(out, y)


def test_destroy_then_calls_and_weight_copies_as_poptorch():
    torch.manual_seed(0)
    net = Fitted()
    eager = Fitted()
    eager.load_state_dict(net.state_dict())
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.1)
    model = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    model.destroy()  # not compiled: nothing happens, the module stays wrapped
    assert type(net).__name__ == "PoptorchFitted"
    x, y = torch.randn(4, 3), torch.randn(4, 1)
    def step() -> None:  # one call of the device model, one SGD step of the eager one
        model(x, y)
        eager_opt.zero_grad()
        eager(x, y)[1].backward()
        eager_opt.step()

    step()
    step()
    model.destroy()
    assert type(net) is Fitted and not model.isCompiled()
    torch.testing.assert_close(net.fc.weight, eager.fc.weight)  # synced by destroy()
    for method in (model.copyWeightsToHost, model.copyWeightsToDevice):
        with pytest.raises(poptorch.Error, match="not been compiled or has been destroyed"):
            method()
    with pytest.raises(poptorch.Error, match="^Please compile the model before obtaining "
                                             "compilation time\\.$"):
        model.compilationTime()
    model.destroy()  # twice: nothing to do
    # a call compiles again from the host weights and wraps the module again
    step()
    assert type(net).__name__ == "PoptorchFitted"
    torch.testing.assert_close(net.fc.weight, eager.fc.weight)
    with pytest.raises(RuntimeError, match="Model has already been wrapped in "
                                           "'poptorch.trainingModel'. Call model.destroy()"):
        poptorch.trainingModel(net)


def test_the_wrapped_module_copies_through_copy_weights_to_host_and_can_destroy():
    torch.manual_seed(3)
    net = Fitted()
    model = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    calls = []
    original = model.copyWeightsToHost

    def counted():
        calls.append(1)
        original()

    model.copyWeightsToHost = counted
    x, y = torch.randn(4, 3), torch.randn(4, 1)
    model(x, y)
    model(x, y)
    net.fc.weight  # noqa: B018 - reading the weights copies them once
    net.fc.bias  # noqa: B018 - in sync: no copy
    assert calls == [1]
    model(x, y)
    net.copyWeightsToHostIfNeeded()
    net.copyWeightsToHostIfNeeded()
    assert calls == [1, 1]
    with pytest.raises(RuntimeError, match=r"^Model has already been wrapped in "
                                           r"'poptorch\.trainingModel'\. Call model\.destroy\(\) "
                                           r"on the model to unwrap before wrapping again\.$"):
        poptorch.trainingModel(net)
    net.destroy()
    assert type(net) is Fitted and not model.isCompiled()
    again = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    again(x, y)
    assert type(net).__name__ == "PoptorchFitted"


def test_outputs_made_in_forward_come_back_with_poptorchs_warning_per_output():
    class Constants(nn.Module):
        def forward(self, x):
            c = torch.tensor([1.0, 2.0])
            return x * 2, c, [c, (c, torch.ones(3))]

    with pytest.warns(UserWarning, match="Output expected to be on the IPU but is on cpu") as got:
        out = poptorch.inferenceModel(Constants())(torch.ones(2))
    assert sum("Output expected to be on the IPU" in str(w.message) for w in got) == 4
    torch.testing.assert_close(out[0], torch.full((2,), 2.0))
    torch.testing.assert_close(out[1], torch.tensor([1.0, 2.0]))
    torch.testing.assert_close(out[2][1][1], torch.ones(3))
