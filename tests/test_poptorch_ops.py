"""Every converted torch module and op, forward and gradient, against torch on random inputs.

Forward: an ``inferenceModel`` against the module called in torch. Gradient: one SGD step of a
``trainingModel`` (loss = a fixed random projection of the output) against the same step in
torch; equal parameters after the step mean equal gradients.
"""

from __future__ import annotations

import copy
import operator

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402, N812
from torch import nn  # noqa: E402

import xlgraph.poptorch as poptorch  # noqa: E402


class Lambda(nn.Module):
    """``fn(layer(x))``: a parameterised front so that gradients reach every op."""

    def __init__(self, fn, in_features: int, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.front = nn.Linear(in_features, int(torch.tensor(shape).prod()))
        self.shape, self.fn = shape, fn

    def forward(self, x):
        return self.fn(self.front(x).view(-1, *self.shape))


class WithLoss(nn.Module):
    """Loss = sum(output * projection), through ``poptorch.identity_loss``."""

    def __init__(self, model: nn.Module, out_shape: torch.Size) -> None:
        super().__init__()
        self.model = model
        self.register_buffer("projection", torch.randn(out_shape))

    def forward(self, x):
        y = self.model(x)
        return y, poptorch.identity_loss((y * self.projection).sum(), "sum")


def _check(model: nn.Module, x: torch.Tensor, lr: float = 0.1, tol: float = 2e-5) -> None:
    torch.manual_seed(1)
    reference = copy.deepcopy(model)
    expected = reference(x)
    got = poptorch.inferenceModel(copy.deepcopy(model))(x)
    torch.testing.assert_close(got, expected.detach(), rtol=tol, atol=tol)

    ours = WithLoss(copy.deepcopy(model), expected.shape)
    theirs = copy.deepcopy(ours)
    training = poptorch.trainingModel(ours, optimizer=torch.optim.SGD(ours.parameters(), lr=lr))
    _, loss = training(x)
    opt = torch.optim.SGD(theirs.parameters(), lr=lr)
    _, torch_loss = theirs(x)
    torch_loss.backward()
    opt.step()
    torch.testing.assert_close(loss, torch_loss.detach(), rtol=tol, atol=tol)
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=tol, atol=tol, msg=name)
    for (name, b), c in zip(ours.named_buffers(), theirs.buffers()):
        torch.testing.assert_close(b.detach(), c.detach().to(b.dtype), rtol=tol, atol=tol,
                                   msg=name)
    training.destroy()


def _image_model(fn, channels: int = 4, side: int = 6) -> tuple[nn.Module, torch.Tensor]:
    return Lambda(fn, 5, (channels, side, side)), torch.randn(3, 5)


def _vector_model(fn, width: int = 6) -> tuple[nn.Module, torch.Tensor]:
    return Lambda(fn, 5, (width,)), torch.randn(4, 5)


MODULES = {
    "Conv2d": lambda: _image_model(nn.Conv2d(4, 3, 3, stride=2, padding=1)),
    "Conv2d-groups": lambda: _image_model(nn.Conv2d(4, 6, 3, groups=2, bias=False)),
    "MaxPool2d": lambda: _image_model(nn.MaxPool2d(2)),
    "MaxPool2d-stride": lambda: _image_model(nn.MaxPool2d(3, stride=1, padding=1)),
    "AvgPool2d": lambda: _image_model(nn.AvgPool2d(2)),
    "AdaptiveAvgPool2d": lambda: _image_model(nn.AdaptiveAvgPool2d((1, 1))),
    "BatchNorm2d": lambda: _image_model(nn.BatchNorm2d(4)),
    "BatchNorm2d-eval": lambda: _image_model(_eval(nn.BatchNorm2d(4))),
    "BatchNorm1d": lambda: _vector_model(nn.BatchNorm1d(6)),
    "GroupNorm": lambda: _image_model(nn.GroupNorm(2, 4)),
    "LayerNorm": lambda: _vector_model(nn.LayerNorm(6)),
    "Dropout-eval": lambda: _vector_model(_eval(nn.Dropout(0.5))),
    "Linear": lambda: _vector_model(nn.Linear(6, 3)),
    "ReLU": lambda: _vector_model(nn.ReLU()),
    "GELU": lambda: _vector_model(nn.GELU()),
    "GELU-tanh": lambda: _vector_model(nn.GELU(approximate="tanh")),
    "SiLU": lambda: _vector_model(nn.SiLU()),
    "Sigmoid": lambda: _vector_model(nn.Sigmoid()),
    "Tanh": lambda: _vector_model(nn.Tanh()),
    "Softmax": lambda: _vector_model(nn.Softmax(dim=1)),
    "LogSoftmax-dim1": lambda: _vector_model(nn.LogSoftmax(dim=1)),
    "LogSoftmax-dim0": lambda: _vector_model(nn.LogSoftmax(dim=0)),
    "Flatten": lambda: _image_model(nn.Flatten()),
    "Identity": lambda: _vector_model(nn.Identity()),
}

FUNCTIONS = {
    "F.relu": lambda x: F.relu(x),
    "torch.relu": torch.relu,
    "F.gelu": F.gelu,
    "F.silu": F.silu,
    "torch.sigmoid": torch.sigmoid,
    "torch.tanh": torch.tanh,
    "torch.exp": lambda x: torch.exp(x * 0.5),
    "torch.abs": torch.abs,
    "F.softmax": lambda x: F.softmax(x, dim=-1),
    "torch.log_softmax": lambda x: torch.log_softmax(x, 1),
    "view": lambda x: x.view(2, -1),
    "reshape": lambda x: torch.reshape(x, (-1,)),
    "flatten": lambda x: torch.flatten(x.view(4, 2, 3), start_dim=1),
    "permute": lambda x: x.view(4, 2, 3).permute(2, 0, 1),
    "transpose": lambda x: x.transpose(0, 1),
    "t": lambda x: x.t(),
    "unsqueeze-squeeze": lambda x: x.unsqueeze(1).squeeze(1) * 2,
    "cat": lambda x: torch.cat([x, x * 2], dim=1),
    "mean": lambda x: x.mean(dim=1),
    "mean-keepdim": lambda x: torch.mean(x, 0, keepdim=True),
    "sum": lambda x: torch.sum(x, dim=-1),
    "sum-all": lambda x: x.sum(),
    "matmul": lambda x: x @ x.t(),
    "torch.matmul": lambda x: torch.matmul(x, x.t()),
    "arith": lambda x: (x + 1) * x - x / 3 - 2 ** x.neg() + x ** 2,
    "torch.max-dim": lambda x: torch.max(x, 1)[0],
    "torch.max": lambda x: torch.max(x) + x,
    "torch.add-alpha": lambda x: torch.add(x, x * x, alpha=0.5),
    "size": lambda x: x.view(x.size(0), x.shape[1] // 2, 2).sum(2),
    "F.max_pool2d": lambda x: F.max_pool2d(x.view(4, 1, 2, 3), (2, 1)),
    "F.linear": lambda x: F.linear(x, x[:2], None),
    "operator.getitem": lambda x: operator.getitem(x, (slice(None), slice(1, 4))),
    "torch.sqrt-log": lambda x: torch.sqrt(x * x + 1) + torch.log(x * x + 2),
    "sub-div": lambda x: torch.div(torch.sub(x, x * 0.5, alpha=2), x * x + 1),
    "float-to": lambda x: x.float().to(torch.float32).contiguous().clone(),
    "torch.permute": lambda x: torch.permute(x.view(2, 2, 6), (2, 0, 1)),
    "torch.transpose": lambda x: torch.transpose(x, 0, 1).t(),
    "torch.squeeze": lambda x: torch.squeeze(torch.unsqueeze(x, 0), 0),
    "torch.concat": lambda x: torch.concat([x, -x], 0),
    "F.avg_pool2d": lambda x: F.avg_pool2d(x.view(4, 1, 2, 3), (2, 1)),
    "F.layer_norm": lambda x: F.layer_norm(x, (6,)),
    "F.group_norm": lambda x: F.group_norm(x.view(4, 6, 1), 2),
}


def _eval(module: nn.Module) -> nn.Module:
    return module.eval()


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_matches_torch(name):
    torch.manual_seed(0)
    model, x = MODULES[name]()
    _check(model, x)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_function_matches_torch(name):
    torch.manual_seed(0)
    model, x = _vector_model(FUNCTIONS[name])
    _check(model, x)


def test_embedding_matches_torch():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(10, 4), nn.Flatten(), nn.Linear(12, 2))
    _check(model, torch.randint(0, 10, (5, 3)))


class LossModel(nn.Module):
    def __init__(self, loss: nn.Module) -> None:
        super().__init__()
        self.front = nn.Linear(5, 4)
        self.loss = loss

    def forward(self, x, target):
        y = self.front(x)
        return y, self.loss(y, target)


LOSSES = {
    "CrossEntropyLoss": (nn.CrossEntropyLoss(), lambda: torch.randint(0, 4, (6,))),
    "CrossEntropyLoss-sum": (nn.CrossEntropyLoss(reduction="sum"),
                             lambda: torch.randint(0, 4, (6,))),
    "NLLLoss": (nn.Sequential(), None),
    "MSELoss": (nn.MSELoss(), lambda: torch.randn(6, 4)),
    "L1Loss": (nn.L1Loss(), lambda: torch.randn(6, 4)),
    "BCEWithLogitsLoss": (nn.BCEWithLogitsLoss(), lambda: torch.rand(6, 4).round()),
}


class NLLModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.front = nn.Linear(5, 4)

    def forward(self, x, target):
        y = F.log_softmax(self.front(x), dim=1)
        return y, F.nll_loss(y, target)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_loss_matches_torch(name):
    torch.manual_seed(0)
    if name == "NLLLoss":
        model, target = NLLModel(), torch.randint(0, 4, (6,))
    else:
        loss, make_target = LOSSES[name]
        model, target = LossModel(loss), make_target()
    x = torch.randn(6, 5)
    reference = copy.deepcopy(model)
    training = poptorch.trainingModel(model, optimizer=torch.optim.SGD(model.parameters(), 0.5))
    out, loss_value = training(x, target)
    expected_out, expected_loss = reference(x, target)
    torch.testing.assert_close(out, expected_out.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(loss_value, expected_loss.detach(), rtol=1e-5, atol=1e-5)
    expected_loss.backward()
    torch.optim.SGD(reference.parameters(), 0.5).step()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-5, atol=1e-5)


class ArgMax(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 4)

    def forward(self, x):
        y = self.fc(x)
        return torch.argmax(y, dim=1), y.argmax(), torch.max(y, 1).indices, y.max(1)[0]


def test_argmax_and_max_indices_match_torch():
    torch.manual_seed(0)
    model = ArgMax()
    x = torch.randn(6, 5)
    got = poptorch.inferenceModel(model)(x)
    expected = model(x)
    for g, e in zip(got, expected):
        assert g.shape == e.shape
        torch.testing.assert_close(g.to(e.dtype), e.detach())


class Bucketize(nn.Module):
    def __init__(self, boundaries: torch.Tensor, right: bool, out_int32: bool) -> None:
        super().__init__()
        self.register_buffer("boundaries", boundaries)
        self.right, self.out_int32 = right, out_int32

    def forward(self, x):
        return torch.bucketize(x, self.boundaries, right=self.right, out_int32=self.out_int32)


_SEEDED = torch.Generator().manual_seed(7)


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=_SEEDED)


@pytest.mark.parametrize("right", [False, True])
@pytest.mark.parametrize("values,boundaries", [
    (torch.arange(1.0, 10.0), torch.tensor([1.0, 2.0, 3.0, 6.0, 4.0, 5.0])),  # unsorted
    (_randn(3, 5), torch.sort(_randn(7)).values),
    (_randn(20), _randn(11)),  # random order, odd length
    (torch.arange(-2, 8), torch.tensor([0.5, 2.5, 2.5, 6.0])),  # int values, float boundaries
    (torch.tensor([0.0, 1.0, 2.0]), torch.tensor([1.0])),
    (torch.tensor([3.0, -3.0]), torch.tensor([2.0, 1.0, 0.0, -1.0])),  # descending
])
def test_bucketize_is_torchs_binary_search(values, boundaries, right):
    model = Bucketize(boundaries, right, out_int32=False)
    out = poptorch.inferenceModel(model)(values)
    torch.testing.assert_close(out.long(), model(values))
    if values.numel() == 9:  # the example PopTorch's behaviour rests on
        want = [1, 2, 3, 3, 3, 6, 6, 6, 6] if right else [0, 1, 2, 3, 3, 3, 6, 6, 6]
        assert out.tolist() == want


def test_bucketize_out_int32():
    model = Bucketize(torch.tensor([0.0, 1.0]), right=False, out_int32=True)
    out = poptorch.inferenceModel(model)(torch.tensor([-1.0, 0.5, 2.0]))
    assert out.dtype == torch.int32 and out.tolist() == [0, 1, 2]
