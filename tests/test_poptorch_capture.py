"""ATen-level capture: ordinary torch code in ``forward`` runs as in eager torch."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import xlgraph.poptorch as poptorch  # noqa: E402
from xlgraph.poptorch.capture import DataDependentError  # noqa: E402


class VarArgs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, *args, scale=1.0, **kwargs):
        pair, items = args
        y = self.fc(pair[0]) + self.fc(pair[1]) * kwargs["weights"]["w"]
        return {"sum": y * scale + items[0].sum(), "list": [y.relu(), items[1]]}


class PythonHeavy(nn.Module):
    """Item assignment, ``.device``, shape arithmetic, a module made in forward, in place ops."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x, t):
        y = self.fc(x)
        y[:, 0] = t  # item assignment from a 0-d tensor input
        n = y.shape[0] * y.shape[1] // y.numel()
        z = torch.zeros(y.shape[0], 2, device=x.device)
        y = y.view(y.size(0), 3, -1).sum(-1) * n
        y.add_(1.0).mul_(0.5)
        act = nn.Hardtanh(-0.4, 0.4)  # created inside forward
        return act(torch.cat([y, z], 1))


def test_nested_star_and_keyword_inputs_match_eager():
    torch.manual_seed(0)
    model = VarArgs()
    a, b, c = torch.randn(2, 4), torch.randn(2, 4), torch.randn(2, 3)
    items = [torch.randn(5), torch.randn(2, 2)]
    args = ((a, b), items)
    kwargs = {"scale": 2.0, "weights": {"w": c}}
    got = poptorch.inferenceModel(model)(*args, **kwargs)
    expected = model(*args, **kwargs)
    torch.testing.assert_close(got["sum"], expected["sum"].detach())
    torch.testing.assert_close(got["list"][0], expected["list"][0].detach())
    torch.testing.assert_close(got["list"][1], expected["list"][1])


def test_python_in_forward_and_a_forward_set_on_the_instance():
    torch.manual_seed(0)
    model = PythonHeavy()
    x, t = torch.randn(4, 6), torch.tensor(0.25)
    torch.testing.assert_close(poptorch.inferenceModel(model)(x, t), model(x, t).detach())
    other = PythonHeavy()
    other.forward = lambda x, t: torch.tanh(other.fc(x)) * t  # noqa: PLW0108
    torch.testing.assert_close(poptorch.inferenceModel(other)(x, t), other(x, t).detach())


class Counter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))
        self.register_buffer("total", torch.zeros(3))

    def forward(self, x, labels=None):
        self.calls += 1
        self.total.add_(x.sum(0))
        y = self.fc(x) + self.calls
        return y if labels is None else (y, nn.functional.mse_loss(y, labels))


def test_buffers_updated_in_forward_keep_their_values_between_calls():
    x = torch.randn(2, 3)
    model = Counter()
    inference = poptorch.inferenceModel(model)
    for _ in range(3):
        out = inference(x)
    assert int(model.calls) == 3
    torch.testing.assert_close(model.total, 3 * x.sum(0))
    torch.testing.assert_close(out, model.fc(x).detach() + 3)
    training = poptorch.trainingModel(Counter(), poptorch.Options().deviceIterations(2))
    training(torch.randn(4, 3), torch.randn(4, 3))
    training(torch.randn(4, 3), torch.randn(4, 3))
    assert int(training.calls) == 4  # two device iterations per call


def test_parameters_and_buffers_keep_their_state_dict_names():
    from xlgraph.ir import Ir
    from xlgraph.poptorch.lowering import lower_module

    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2))
    lowered = lower_module(Ir(), model, {"input": torch.randn(1, 1, 5, 5)}, training=False)
    assert set(lowered.params.values()) == set(model.state_dict())
    assert set(lowered.buffer_updates.values()) == {"1.running_mean", "1.running_var",
                                                    "1.num_batches_tracked"}


def test_argmax_returns_int32_as_poptorch_and_mixed_dtypes_promote():
    class Mixed(nn.Module):
        def forward(self, x, i, h):
            return torch.argmax(x, 1), x + i, h * 2 + x, (i > 1).sum()

    x, i = torch.randn(3, 4), torch.randint(0, 4, (3, 4))
    h = torch.randn(3, 4).half()
    got = poptorch.inferenceModel(Mixed())(x, i, h)
    expected = Mixed()(x, i, h)
    for g, e in zip(got, expected):
        # PopTorch computes 64-bit integers in 32 bits and returns them so
        assert g.dtype == (torch.int32 if e.dtype == torch.int64 else e.dtype)
        torch.testing.assert_close(g, e.to(g.dtype), rtol=1e-3, atol=1e-3)


def test_data_dependent_control_flow_names_the_module_and_line():
    class Branchy(nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x * 2
            return x

    model = nn.Sequential(nn.Linear(3, 3), Branchy())
    with pytest.raises(DataDependentError) as info:
        poptorch.inferenceModel(model)(torch.randn(2, 3))
    message = str(info.value)
    assert "model.1" in message and "if x.sum() > 0:" in message
    assert "test_poptorch_capture.py" in message and "poptorch.cond" in message


def test_a_new_input_signature_needs_a_new_wrapper_or_destroy():
    model = nn.Linear(3, 2)
    inference = poptorch.inferenceModel(copy.deepcopy(model))
    compiled = (4, 3)
    for shape in ((4, 3), (5, 3), (5, 3), (4, 3)):
        x = torch.randn(shape)
        if shape != compiled:
            with pytest.raises(poptorch.Error, match=r"Shape mismatch for input"):
                inference(x)
            inference.destroy()  # compiles again at the next call
            compiled = shape
        torch.testing.assert_close(inference(x), model(x).detach())
    inference.destroy()
    torch.testing.assert_close(inference(torch.randn(2, 7, 3)).shape, torch.Size([2, 7, 2]))


def test_ctc_loss_trains_like_torch():
    class Speech(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 5)
            self.loss = nn.CTCLoss()

        def forward(self, x, targets, input_lengths, target_lengths):
            lp = self.fc(x).log_softmax(2)
            return lp, self.loss(lp, targets, input_lengths, target_lengths)

    torch.manual_seed(0)
    model = Speech()
    reference = copy.deepcopy(model)
    args = (torch.randn(7, 2, 3), torch.tensor([[1, 4, 4], [2, 3, 0]]), torch.tensor([7, 6]),
            torch.tensor([3, 2]))
    training = poptorch.trainingModel(model, optimizer=torch.optim.SGD(model.parameters(), 0.5))
    _, loss = training(*args)
    _, expected = reference(*args)
    expected.backward()
    torch.optim.SGD(reference.parameters(), 0.5).step()
    torch.testing.assert_close(loss, expected.detach(), rtol=1e-5, atol=1e-5)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("forward", [
    lambda x: x[x > 0],                 # returned
    lambda x: x[x > 0].sum() * 2,       # reduced
    lambda x: torch.nonzero(x > 0),
])
def test_a_data_dependent_shape_is_torchs_dynamic_output_shape_exception(forward):
    from torch._subclasses.fake_tensor import DynamicOutputShapeException

    class Select(nn.Module):
        def forward(self, x):
            return forward(x)

    with pytest.raises(DynamicOutputShapeException) as info:
        poptorch.inferenceModel(Select())(torch.randn(2, 3))
    assert isinstance(info.value, poptorch.Error)  # and still PopTorch's error, with its advice
    assert "depends on the data" in str(info.value) and "torch.where" in str(info.value)
    assert {info.value: 1}[info.value] == 1  # hashable, as exceptions are


def test_reading_a_value_with_item_is_not_a_shape_error():
    from torch._subclasses.fake_tensor import DynamicOutputShapeException

    class Read(nn.Module):
        def forward(self, x):
            return x + x.sum().item()

    with pytest.raises(DataDependentError) as info:
        poptorch.inferenceModel(Read())(torch.randn(2, 3))
    assert not isinstance(info.value, DynamicOutputShapeException)
