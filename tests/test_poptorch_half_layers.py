"""float16 activations meeting float32 weights, as PopTorch defines them: a ``Linear`` or
convolution computes in its activation's float type (float32 weights fed ``x.half()`` give
float16; ``.half()`` weights fed float32 give float32), other mixed ops promote as torch does,
and training updates float32 weights in float32. The eager references cast the weights to the
activation's type, which is PopTorch's definition (torch eager refuses the mixed layers)."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import xlgraph.poptorch as poptorch  # noqa: E402

HALF = {"rtol": 1e-2, "atol": 2e-3}  # float16 results against float16 eager


def _run(model, *args):
    return poptorch.inferenceModel(model)(*args)


LAYERS = {
    "linear": (lambda: nn.Linear(6, 3), (4, 6)),
    "conv1d": (lambda: nn.Conv1d(2, 3, 3, padding=1), (2, 2, 7)),
    "conv2d": (lambda: nn.Conv2d(2, 3, 3, stride=2), (2, 2, 7, 7)),
    "conv3d": (lambda: nn.Conv3d(2, 2, 2), (1, 2, 4, 4, 4)),
    "conv_transpose2d": (lambda: nn.ConvTranspose2d(2, 3, 3, stride=2), (2, 2, 4, 4)),
}


@pytest.mark.parametrize("name", LAYERS)
def test_float32_layer_fed_half_input_computes_in_half(name):
    make, shape = LAYERS[name]
    torch.manual_seed(0)
    layer, x = make(), torch.randn(shape).half()
    got = _run(layer, x)
    assert got.dtype == torch.float16 and layer.weight.dtype == torch.float32
    torch.testing.assert_close(got, copy.deepcopy(layer).half()(x), **HALF)


@pytest.mark.parametrize("name", ["linear", "conv2d"])
def test_half_layer_fed_float32_input_computes_in_float32(name):
    make, shape = LAYERS[name]
    torch.manual_seed(1)
    layer, x = make().half(), torch.randn(shape)
    got = _run(layer, x)
    assert got.dtype == torch.float32 and layer.weight.dtype == torch.float16
    torch.testing.assert_close(got, copy.deepcopy(layer).float()(x))


def test_functional_layers_follow_the_activation():
    class Functional(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(3, 2, 3, 3))
            self.b = nn.Parameter(torch.randn(3))
            self.fc = nn.Parameter(torch.randn(4, 3))

        def forward(self, x):
            y = F.conv2d(x, self.w, self.b, padding=1)
            return y, F.linear(y.mean((2, 3)), self.fc), torch.conv2d(x, self.w, bias=self.b)

    torch.manual_seed(2)
    model, x = Functional(), torch.randn(2, 2, 5, 5).half()
    got = _run(model, x)
    want = copy.deepcopy(model).half()(x)
    assert [g.dtype for g in got] == [torch.float16] * 3
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, **HALF)


class Mixed(nn.Module):
    """A convolution and a linear layer fed float16, then a float32 parameter added: torch's
    promotion (float32) for the addition."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.fc = nn.Linear(4 * 4 * 4, 3)
        self.shift = nn.Parameter(torch.randn(3))

    def forward(self, x):
        y = self.fc(torch.relu(self.conv(x)).flatten(1))
        return y, y + self.shift


def test_model_mixing_conv_linear_and_a_promoting_op():
    torch.manual_seed(3)
    model, x = Mixed(), torch.randn(2, 1, 6, 6).half()
    y, shifted = _run(model, x)
    assert (y.dtype, shifted.dtype) == (torch.float16, torch.float32)
    ref = copy.deepcopy(model)
    ref.conv.half(), ref.fc.half()
    want_y, want_shifted = ref(x)
    assert want_shifted.dtype == torch.float32  # torch's own promotion of y + shift
    torch.testing.assert_close(y, want_y, **HALF)
    torch.testing.assert_close(shifted, want_shifted, **HALF)


class Trained(Mixed):
    def forward(self, x, target):
        y = super().forward(x)[0]
        return y, F.mse_loss(y, target)


def _eager_step(model, x, target, lr):
    """One SGD step with PopTorch's definition: the layers run on float16 copies of the float32
    parameters, and the gradients flow back through the casts to the float32 parameters."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    halves = {k: (v.half() if not k.startswith("shift") else v)
              for k, v in model.named_parameters()}
    opt.zero_grad()
    out, loss = torch.func.functional_call(model, halves, (x, target))
    loss.backward()
    opt.step()
    return out, loss


def test_training_updates_float32_weights_through_half_layers():
    torch.manual_seed(4)
    net = Trained()
    reference, initial = copy.deepcopy(net), copy.deepcopy(net)
    model = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    x, target = torch.randn(4, 1, 6, 6).half(), torch.randn(4, 3).half()
    for _ in range(3):
        out, loss = model(x, target)
        want_out, want_loss = _eager_step(reference, x, target, lr=0.1)
        assert out.dtype == loss.dtype == torch.float16
        torch.testing.assert_close(out, want_out, **HALF)
        torch.testing.assert_close(loss, want_loss, **HALF)
    model.copyWeightsToHost()
    for (name, p), q, first in zip(net.named_parameters(), reference.parameters(),
                                   initial.parameters()):
        assert p.dtype == torch.float32, name
        assert name == "shift" or not torch.equal(p, first), name  # shift is not in the loss
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-2, atol=2e-3)


def test_half_model_fed_float32_trains_its_half_weights_in_float32_layers():
    torch.manual_seed(5)
    net = Trained().half()
    reference = copy.deepcopy(net)
    model = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    x, target = torch.randn(4, 1, 6, 6), torch.randn(4, 3)
    out, loss = model(x, target)
    assert out.dtype == loss.dtype == torch.float32
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    floats = {k: v.float() for k, v in reference.named_parameters()}
    want_out, want_loss = torch.func.functional_call(reference, floats, (x, target))
    want_loss.backward()
    opt.step()
    torch.testing.assert_close(out, want_out)
    torch.testing.assert_close(loss, want_loss)
    model.copyWeightsToHost()
    for p, q in zip(net.parameters(), reference.parameters()):
        assert p.dtype == torch.float16
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-3, atol=1e-3)
