"""Writing into basic slices inside ``forward`` as PopTorch supports it: assigning, filling and
changing in place (``x[1:4] += 1``, ``x[:, :2].mul_(...)``, chained and ``select`` slices,
``torch.slice_scatter``), the caller's input updated too; a stepped slice written is refused.
Values and gradients against torch eager."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import xlgraph.poptorch as poptorch  # noqa: E402


def test_slice_writes_on_an_input_reach_the_callers_tensor():
    class OnInput(nn.Module):
        def forward(self, x, y):
            x[1:4, :] += 1
            x[0:2] = 0
            x[:, 1:3] = y
            x[:, :2][1:3].mul_(3.0)
            x[2, 1:3] -= y[0]
            return x * 2

    x, y = torch.randn(5, 4), torch.randn(5, 2)
    eager_x = x.clone()
    want = OnInput()(eager_x, y)
    got = poptorch.inferenceModel(OnInput())(x, y)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(x, eager_x)


def test_slice_scatter_matches_torch():
    class Scatter(nn.Module):
        def forward(self, x, y):
            return torch.slice_scatter(x, y, dim=1, start=2, end=4), \
                torch.slice_scatter(x, x[:1] * 3.0, start=-1)

    x, y = torch.randn(3, 6), torch.randn(3, 2)
    got = poptorch.inferenceModel(Scatter())(x, y)
    for g, w in zip(got, Scatter()(x, y)):
        torch.testing.assert_close(g, w)


def test_slice_writes_train_like_torch():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x, target):
            h = self.fc(x)
            h[:, 1:3] = h[:, 1:3] * 2.0
            h[0:1] += 1.0
            return h, nn.functional.mse_loss(h, target)

    torch.manual_seed(0)
    net = Net()
    reference = copy.deepcopy(net)
    x, target = torch.randn(3, 4), torch.randn(3, 4)
    poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))(x, target)
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    reference(x, target)[1].backward()
    opt.step()
    torch.testing.assert_close(net.fc.weight.detach(), reference.fc.weight.detach())
    torch.testing.assert_close(net.fc.bias.detach(), reference.fc.bias.detach())


def test_writing_a_stepped_slice_is_refused_and_reading_one_is_fine():
    class Stepped(nn.Module):
        def forward(self, x):
            x[::2] = 0
            return x

    with pytest.raises(poptorch.Error, match=r"^In-place modification of slices with step size "
                                             r"other than 1 is not supported\.$"):
        poptorch.inferenceModel(Stepped())(torch.randn(4, 3))

    class Read(nn.Module):
        def forward(self, x):
            return x[::2] * 2

    x = torch.randn(5, 3)
    torch.testing.assert_close(poptorch.inferenceModel(Read())(x), x[::2] * 2)
