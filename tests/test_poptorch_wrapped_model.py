"""The module a PopTorch wrapper holds, as PopTorch programs use it: implicit weight copies
through the training model's public ``copyWeightsToHost``, ``model.destroy()`` and wrapping
again, and an inference model that sees training of the same module but not other host edits
until ``copyWeightsToDevice()``. Every value is compared with the same steps in torch eager."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
poptorch = pytest.importorskip("xlgraph.poptorch")


class Fitted(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x, y=None):
        out = self.fc(x)
        return out if y is None else (out, nn.functional.mse_loss(out, y))


X, Y = torch.randn(4, 3, generator=torch.Generator().manual_seed(1)), torch.zeros(4, 2)


def _pair(seed=0):
    """A module and its eager twin with the same weights, and the twin's SGD step."""
    torch.manual_seed(seed)
    net, eager = Fitted(), Fitted()
    eager.load_state_dict(net.state_dict())
    opt = torch.optim.SGD(eager.parameters(), lr=0.1)

    def step():
        opt.zero_grad()
        eager(X, Y)[1].backward()
        opt.step()

    return net, eager, step


def _eager_out(eager):
    with torch.no_grad():
        return eager(X)


def test_reading_trained_weights_calls_the_instance_copy_weights_to_host_once_per_stale_period():
    net, eager, step = _pair()
    training = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    calls = []
    original = training.copyWeightsToHost

    def counted():  # a wrapper replacing the method on the instance, as programs do
        calls.append(1)
        original()

    training.copyWeightsToHost = counted
    for _ in range(3):
        training(X, Y)
        step()
    assert calls == []  # nothing read the host weights yet
    torch.testing.assert_close(net.fc.weight, eager.fc.weight)
    torch.testing.assert_close(net.state_dict()["fc.bias"], eager.fc.bias.detach())
    assert calls == [1]
    inference = poptorch.inferenceModel(net)
    torch.testing.assert_close(inference(X), _eager_out(eager))
    assert calls == [1]  # in sync: no copy
    training(X, Y)
    step()
    # the inference model brings the newer weights over: one copy through the replaced method
    torch.testing.assert_close(inference(X), _eager_out(eager))
    torch.testing.assert_close(inference(X), _eager_out(eager))
    assert calls == [1, 1]
    training(X, Y)
    step()
    assert net.copyWeightsToHostIfNeeded() is True
    assert net.copyWeightsToHostIfNeeded() is False
    assert calls == [1, 1, 1]
    torch.testing.assert_close(net.fc.weight, eager.fc.weight)
    training(X, Y)
    step()
    net.double()  # reads the module's _parameters: the trained values are converted
    assert calls == [1, 1, 1, 1]
    torch.testing.assert_close(net.fc.weight, eager.fc.weight.double())


def test_destroy_on_the_module_unwraps_it_and_it_can_be_wrapped_again():
    net, eager, step = _pair(2)
    training = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    training(X, Y)
    step()
    message = (r"^Model has already been wrapped in 'poptorch\.trainingModel'\. Call "
               r"model\.destroy\(\) on the model to unwrap before wrapping again\.$")
    with pytest.raises(RuntimeError, match=message):
        poptorch.trainingModel(net)
    net.destroy()  # releases the executable and unwraps, with the trained weights on the host
    assert type(net) is Fitted and not training.isCompiled()
    torch.testing.assert_close(net.fc.weight, eager.fc.weight)
    again = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    again(X, Y)
    step()
    torch.testing.assert_close(net.fc.weight, eager.fc.weight)
    # trainingModel(wrapper) after wrapper.destroy() wraps the wrapper's module again
    again.destroy()
    third = poptorch.trainingModel(again, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    assert third.model is net and type(net).__name__ == "PoptorchFitted"
    out, _ = third(X, Y)
    torch.testing.assert_close(out, _eager_out(eager))
    step()
    torch.testing.assert_close(net.fc.bias, eager.fc.bias)


def test_inference_model_sees_host_edits_only_after_copy_weights_to_device():
    net, eager, _ = _pair(4)
    inference = poptorch.inferenceModel(net)
    with torch.no_grad():  # before the first call: compiled with it
        net.fc.bias.add_(1.0)
        eager.fc.bias.add_(1.0)
    first = inference(X)
    torch.testing.assert_close(first, _eager_out(eager))
    # training the module on the CPU with a torch optimiser: the device keeps the old weights
    opt = torch.optim.SGD(net.parameters(), lr=0.5)
    for _ in range(2):
        opt.zero_grad()
        net(X, Y)[1].backward()
        opt.step()
    with torch.no_grad():
        net.fc.weight.mul_(2.0)
    assert not torch.allclose(net(X), first)
    torch.testing.assert_close(inference(X), first)
    torch.testing.assert_close(inference(X), first)
    inference.copyWeightsToDevice()
    torch.testing.assert_close(inference(X), net(X).detach())
    # detached, edited, attached again: attaching uploads the host weights
    inference.detachFromDevice()
    with torch.no_grad():
        net.fc.bias.zero_()
    inference.attachToDevice()
    torch.testing.assert_close(inference(X), X @ net.fc.weight.detach().T)
    # the wrapper's load_state_dict writes the module and the device
    inference.load_state_dict(eager.state_dict())
    torch.testing.assert_close(inference(X), _eager_out(eager))


def test_inference_model_follows_training_of_the_same_module_not_host_edits_between():
    net, eager, step = _pair(5)
    training = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    inference = poptorch.inferenceModel(net)
    training(X, Y)
    step()
    torch.testing.assert_close(inference(X), _eager_out(eager))
    stale = inference(X)
    with torch.no_grad():  # a plain host edit of the wrapped module: the inference model
        net.fc.bias.add_(3.0)  # keeps what it uploaded
        eager.fc.bias.add_(3.0)
    training.copyWeightsToDevice()  # the training model's device has the edit now
    torch.testing.assert_close(inference(X), stale)
    # training moves the host weights on: the inference model uploads all of them again
    training(X, Y)
    step()
    torch.testing.assert_close(inference(X), _eager_out(eager))


def test_inference_model_updating_buffers_keeps_host_weight_edits_off_the_device():
    # BatchNorm left in training mode: every inference call updates its running statistics
    torch.manual_seed(6)
    net = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    eager = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    eager.load_state_dict(net.state_dict())
    inference = poptorch.inferenceModel(net)
    torch.testing.assert_close(inference(X), eager(X).detach())
    with torch.no_grad():
        net[0].bias.add_(1.0)  # not on the device until copyWeightsToDevice()
    for _ in range(2):
        torch.testing.assert_close(inference(X), eager(X).detach())
        torch.testing.assert_close(net[1].running_mean, eager[1].running_mean)
    torch.testing.assert_close(net[0].bias, eager[0].bias + 1.0)  # the host keeps its edit
    inference.copyWeightsToDevice()
    with torch.no_grad():
        eager[0].bias.add_(1.0)
    torch.testing.assert_close(inference(X), eager(X).detach())
    torch.testing.assert_close(net[1].running_mean, eager[1].running_mean)
