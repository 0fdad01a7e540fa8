"""Training through ``xlgraph.poptorch`` against torch eager: loss curves, optimisers,
gradient accumulation and learning-rate changes."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import xlgraph.poptorch as poptorch  # noqa: E402


def assert_same_parameters(model, reference, rtol: float, atol: float) -> None:
    """Every parameter of ``model`` equals the matching one of ``reference``."""
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=rtol, atol=atol)


class Block(nn.Module):
    def __init__(self, in_channels, num_filters, kernel_size, pool_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, num_filters, kernel_size=kernel_size)
        self.pool = nn.MaxPool2d(kernel_size=pool_size)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.pool(self.conv(x)))


class Network(nn.Module):
    """Seed 000's network."""

    def __init__(self):
        super().__init__()
        self.layer1 = Block(1, 32, 3, 2)
        self.layer2 = Block(32, 64, 3, 2)
        self.layer3 = nn.Linear(1600, 128)
        self.layer3_act = nn.ReLU()
        self.layer3_dropout = nn.Dropout(0.5)
        self.layer4 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.layer2(self.layer1(x))
        x = x.view(-1, 1600)
        x = self.layer3_act(self.layer3(x))
        return self.layer4(self.layer3_dropout(x))


class WithLoss(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model
        self.loss = nn.CrossEntropyLoss()

    def forward(self, args, loss_inputs=None):
        output = self.model(args)
        return output, self.loss(output, loss_inputs)


def _eager_losses(model, optimizer, batches):
    losses = []
    for x, y in batches:
        optimizer.zero_grad()
        _, loss = model(x, y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_seed_000_network_follows_torch_for_20_steps():
    torch.manual_seed(0)
    net = Network()
    net.layer3_dropout.eval()  # dropout off, so both sides compute the same function
    reference = copy.deepcopy(WithLoss(net))
    x, y = torch.randn(80, 1, 28, 28), torch.randint(0, 10, (80,))
    opts = poptorch.Options().deviceIterations(5).anchorMode(poptorch.AnchorMode.All)
    model = poptorch.trainingModel(WithLoss(net), opts, torch.optim.SGD(net.parameters(), 0.03))
    ours = []
    for step in range(4):
        rows = slice(20 * step, 20 * (step + 1))
        preds, losses = model(x[rows], y[rows])
        assert preds.shape == (20, 10) and losses.shape == (5,)
        ours += losses.tolist()
    eager = _eager_losses(reference, torch.optim.SGD(reference.parameters(), 0.03),
                          [(x[4 * i:4 * i + 4], y[4 * i:4 * i + 4]) for i in range(20)])
    np.testing.assert_allclose(ours, eager, rtol=2e-4, atol=2e-5)
    assert eager[-1] != eager[0]
    assert_same_parameters(net, reference, rtol=1e-3, atol=2e-4)  # 20 steps of float32 rounding


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 8)
        self.fc2 = nn.Linear(8, 3)
        self.loss = nn.CrossEntropyLoss()

    def forward(self, x, y):
        out = self.fc2(torch.tanh(self.fc1(x)))
        return out, self.loss(out, y)


_TORCH = {
    "SGD": lambda p: torch.optim.SGD(p, lr=0.1),
    "SGD-momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01),
    "SGD-nesterov": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.5, nesterov=True),
    "SGD-dampening": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.3),
    "Adam": lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.1),
    "AdamW": lambda p: torch.optim.AdamW(p, lr=0.01),
    "RMSprop": lambda p: torch.optim.RMSprop(p, lr=0.01, momentum=0.5, centered=True),
}
# name: (the optimizer given to trainingModel, the torch optimizer of the eager reference)
OPTIMIZERS = {name: (make, make) for name, make in _TORCH.items()}
OPTIMIZERS.update({
    "poptorch.SGD": (lambda p: poptorch.optim.SGD(p, lr=0.1, momentum=0.9, loss_scaling=1.0),
                     lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
    "poptorch.Adam": (lambda p: poptorch.optim.Adam(p, lr=0.01),
                      lambda p: torch.optim.Adam(p, lr=0.01)),
    "poptorch.AdamW": (lambda p: poptorch.optim.AdamW(p, lr=0.01, weight_decay=0.05),
                       lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.05)),
    "poptorch.RMSprop": (lambda p: poptorch.optim.RMSprop(p, lr=0.01, alpha=0.9),
                         lambda p: torch.optim.RMSprop(p, lr=0.01, alpha=0.9)),
})


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_matches_torch(name):
    torch.manual_seed(0)
    model = Small()
    reference = copy.deepcopy(model)
    ours, theirs = OPTIMIZERS[name]
    opts = poptorch.Options().deviceIterations(3)
    training = poptorch.trainingModel(model, opts, ours(model.parameters()))
    x, y = torch.randn(12, 6), torch.randint(0, 3, (12,))
    training(x[:9], y[:9])
    training(x[3:], y[3:])
    batches = [(x[3 * i:3 * i + 3], y[3 * i:3 * i + 3]) for i in range(3)]
    batches += [(x[3 + 3 * i:6 + 3 * i], y[3 + 3 * i:6 + 3 * i]) for i in range(3)]
    _eager_losses(reference, theirs(reference.parameters()), batches)
    assert_same_parameters(model, reference, rtol=1e-4, atol=1e-5)


def _torch_lamb(params, grads, state, lr, betas, eps, wd, step):
    for p, g in zip(params, grads):
        m, v = state.setdefault(id(p), (torch.zeros_like(p), torch.zeros_like(p)))
        m.mul_(betas[0]).add_(g, alpha=1 - betas[0])
        v.mul_(betas[1]).addcmul_(g, g, value=1 - betas[1])
        u = (m / (1 - betas[0] ** step)) / ((v / (1 - betas[1] ** step)).sqrt() + eps) + wd * p
        r1, r2 = p.norm(), u.norm()
        trust = r1 / r2 if r1 > 0 and r2 > 0 else 1.0
        p.sub_(lr * trust * u)


def test_lamb_matches_its_definition():
    torch.manual_seed(0)
    model = Small()
    reference = copy.deepcopy(model)
    training = poptorch.trainingModel(model, optimizer=poptorch.optim.LAMB(
        model.parameters(), lr=0.01, weight_decay=0.1))
    x, y = torch.randn(4, 6), torch.randint(0, 3, (4,))
    state = {}
    for step in (1, 2, 3):
        training(x, y)
        reference.zero_grad()
        reference(x, y)[1].backward()
        params = list(reference.parameters())
        with torch.no_grad():
            _torch_lamb(params, [p.grad for p in params], state, 0.01, (0.9, 0.999), 1e-8, 0.1,
                        step)
    assert_same_parameters(model, reference, rtol=1e-4, atol=1e-5)


def test_gradient_accumulation_equals_one_step_on_the_concatenation():
    torch.manual_seed(0)
    model = Small()
    reference = copy.deepcopy(model)
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(3)
    training = poptorch.trainingModel(model, opts, torch.optim.SGD(model.parameters(), lr=0.5))
    x, y = torch.randn(12, 6), torch.randint(0, 3, (12,))
    _, loss = training(x, y)
    assert loss.shape == ()  # Final: the last micro-batch's loss
    opt = torch.optim.SGD(reference.parameters(), lr=0.5)
    _, full = reference(x, y)
    full.backward()
    opt.step()
    assert_same_parameters(model, reference, rtol=1e-5, atol=1e-6)


def test_set_optimizer_changes_the_learning_rate():
    torch.manual_seed(0)
    model = Small()
    reference = copy.deepcopy(model)
    optimizer = poptorch.optim.SGD(model.parameters(), lr=0.1)
    training = poptorch.trainingModel(model, optimizer=optimizer)
    eager_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    eager_scheduler = torch.optim.lr_scheduler.StepLR(eager_opt, step_size=1, gamma=0.5)
    x, y = torch.randn(4, 6), torch.randint(0, 3, (4,))
    for _ in range(3):
        training(x, y)
        _eager_losses(reference, eager_opt, [(x, y)])
        scheduler.step()
        eager_scheduler.step()
        training.setOptimizer(optimizer)
    assert_same_parameters(model, reference, rtol=1e-5, atol=1e-6)
    with pytest.raises(poptorch.Error, match="momentum"):
        training.setOptimizer(poptorch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5))


def test_dropout_trains_with_fresh_masks_and_is_off_in_inference():
    torch.manual_seed(0)
    net = Network()
    opts = poptorch.Options().deviceIterations(2).randomSeed(5)
    training = poptorch.trainingModel(WithLoss(net), opts, torch.optim.SGD(net.parameters(), 0.0))
    x, y = torch.randn(4, 1, 28, 28), torch.randint(0, 10, (4,))
    first, _ = training(torch.cat([x[:2], x[:2]]), torch.cat([y[:2], y[:2]]))
    assert first.shape == (2, 10)  # Final: the last micro-batch
    # lr 0: the weights stay, so the two micro-batches differ only by their dropout masks
    opts_all = poptorch.Options().deviceIterations(2).randomSeed(5).outputMode(
        poptorch.OutputMode.All)
    net2 = copy.deepcopy(net)
    both, _ = poptorch.trainingModel(WithLoss(net2), opts_all, torch.optim.SGD(
        net2.parameters(), 0.0))(torch.cat([x[:2], x[:2]]), torch.cat([y[:2], y[:2]]))
    assert not torch.allclose(both[:2], both[2:])
    net.eval()
    inference = poptorch.inferenceModel(net)
    torch.testing.assert_close(inference(x), net(x).detach(), rtol=1e-5, atol=1e-5)


class Detached(nn.Module):
    """``a`` feeds the loss only through ``detach()`` (or ``clone()``, which keeps the path)."""

    def __init__(self, cut: str) -> None:
        super().__init__()
        self.a, self.b, self.cut = nn.Linear(4, 4), nn.Linear(4, 2), cut

    def forward(self, x, t):
        h = self.a(x)
        out = self.b(h.detach() if self.cut == "detach" else h.clone())
        return out, nn.functional.mse_loss(out, t)


@pytest.mark.parametrize("cut", ["detach", "clone"])
def test_detach_stops_the_gradient_as_in_torch(cut):
    torch.manual_seed(3)
    net = Detached(cut)
    reference = copy.deepcopy(net)
    a_before = net.a.weight.detach().clone()
    model = poptorch.trainingModel(net, optimizer=poptorch.optim.SGD(net.parameters(), lr=0.1))
    eager = torch.optim.SGD(reference.parameters(), lr=0.1)
    x, t = torch.randn(8, 4), torch.randn(8, 2)
    for _ in range(3):
        model(x, t)
        eager.zero_grad()
        reference(x, t)[1].backward()
        eager.step()
    model.copyWeightsToHost()
    assert torch.equal(net.a.weight, a_before) == (cut == "detach")  # bit-identical when cut
    assert_same_parameters(net, reference, rtol=1e-5, atol=1e-6)
