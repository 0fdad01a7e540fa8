"""``setOptimizer`` after compilation, as PopTorch allows it: any variable attribute (momentum,
dampening, weight_decay, betas, eps, alpha, loss_scaling...) may change, per param group, and
training goes on as eager torch does after the same change; a constant attribute refuses the
change with ``poptorch.Error`` and leaves training as it was."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import xlgraph.poptorch as poptorch  # noqa: E402


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(5, 6)
        self.fc2 = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.fc2(torch.tanh(self.fc1(x)))
        return out, nn.functional.mse_loss(out, y)


def _batches(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 5, generator=g), torch.randn(4, 3, generator=g)) for _ in range(n)]


def _eager_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor,
                y: torch.Tensor) -> None:
    opt.zero_grad()
    model(x, y)[1].backward()
    opt.step()


def _groups(model: nn.Module) -> list[dict]:
    return [{"params": model.fc1.parameters()}, {"params": model.fc2.parameters()}]


def _assert_same(model: nn.Module, reference: nn.Module) -> None:
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-5, atol=1e-6, msg=name)


def _start(make) -> tuple:
    """A device model and an eager one, each with an optimiser ``make`` builds, after the same
    two steps; and the two batches left."""
    torch.manual_seed(0)
    model = Net()
    reference = copy.deepcopy(model)
    opt, eager_opt = make(model), make(reference)
    training = poptorch.trainingModel(model, optimizer=opt)
    batches = _batches(4)
    _steps(training, reference, eager_opt, batches[:2])
    return model, reference, opt, eager_opt, training, batches[2:]


def _steps(training, reference, eager_opt, batches) -> None:
    for x, y in batches:
        training(x, y)
        _eager_step(reference, eager_opt, x, y)


def _run(make, change) -> tuple[nn.Module, nn.Module]:
    """``_start``, then ``change(optimizer)`` on both optimisers (``setOptimizer`` on the
    device) and two more steps."""
    model, reference, opt, eager_opt, training, rest = _start(make)
    change(opt)
    change(eager_opt)
    training.setOptimizer(opt)
    _steps(training, reference, eager_opt, rest)
    return model, reference


def _set(**values):
    def change(opt: torch.optim.Optimizer) -> None:
        for index, group_values in values.items():
            opt.param_groups[int(index[1:])].update(group_values)
    return change


@pytest.mark.parametrize("make,change", [
    # poptorch.optim: the arguments given to the constructor are variable
    (lambda m: poptorch.optim.SGD(_groups(m), lr=0.1, momentum=0.9, dampening=0.1,
                                  weight_decay=0.01),
     _set(g0={"momentum": 0.5, "dampening": 0.0}, g1={"weight_decay": 0.2, "lr": 0.05})),
    (lambda m: poptorch.optim.Adam(_groups(m), lr=0.01, betas=(0.9, 0.99), eps=1e-6,
                                   weight_decay=0.0),
     _set(g1={"betas": (0.5, 0.9), "eps": 1e-3, "weight_decay": 0.1})),
    (lambda m: poptorch.optim.AdamW(_groups(m), lr=0.01, weight_decay=0.05),
     _set(g0={"weight_decay": 0.3}, g1={"lr": 0.02})),
    (lambda m: poptorch.optim.RMSprop(_groups(m), lr=0.01, alpha=0.9, momentum=0.5),
     _set(g0={"alpha": 0.5, "momentum": 0.1})),
    # torch.optim: the attributes set to a value other than torch's default are variable
    (lambda m: torch.optim.SGD(_groups(m), lr=0.1, momentum=0.9),
     _set(g1={"momentum": 0.2})),
    (lambda m: torch.optim.Adam(_groups(m), lr=0.01, betas=(0.8, 0.99)),
     _set(g0={"betas": (0.7, 0.9)})),
], ids=["sgd", "adam", "adamw", "rmsprop", "torch-sgd", "torch-adam"])
def test_variable_attributes_change_mid_run_as_in_eager_torch(make, change):
    model, reference = _run(make, change)
    _assert_same(model, reference)


def test_a_variable_attribute_turned_on_after_compilation():
    # momentum 0 given explicitly: variable, so momentum may start mid-run (buffers from zero)
    model, reference = _run(lambda m: poptorch.optim.SGD(m.parameters(), lr=0.1, momentum=0.0),
                               _set(g0={"momentum": 0.9}))
    _assert_same(model, reference)


def test_mark_as_variable_lets_a_default_attribute_change():
    def make(m):
        opt = poptorch.optim.SGD(m.parameters(), lr=0.1)
        opt.variable_attrs.markAsVariable("weight_decay")
        return opt
    model, reference = _run(make, _set(g0={"weight_decay": 0.5}))
    _assert_same(model, reference)


def test_loss_scaling_changes_without_changing_float32_training():
    def change(opt):
        opt.loss_scaling = 64.0

    def make(m):  # in eager torch, poptorch.optim.SGD steps as torch's SGD: no scaling
        return poptorch.optim.SGD(m.parameters(), lr=0.1, loss_scaling=4.0)

    model, reference = _run(make, change)
    _assert_same(model, reference)


@pytest.mark.parametrize("make,change,attr", [
    (lambda m: poptorch.optim.SGD(m.parameters(), lr=0.1), _set(g0={"momentum": 0.9}),
     "momentum"),
    (lambda m: poptorch.optim.Adam(_groups(m), lr=0.01), _set(g1={"eps": 1e-3}), "eps"),
    (lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
     _set(g0={"weight_decay": 0.1}), "weight_decay"),
])
def test_a_constant_attribute_refuses_the_change_and_training_goes_on(make, change, attr):
    model, reference, opt, eager_opt, training, rest = _start(make)
    new = make(model)
    change(new)
    with pytest.raises(poptorch.Error, match=f"{attr} .*is constant"):
        training.setOptimizer(new)
    _steps(training, reference, eager_opt, rest)  # the compiled settings and state go on
    _assert_same(model, reference)


def test_mark_as_constant_makes_a_given_attribute_constant():
    model = Net()
    opt = poptorch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt.variable_attrs.markAsConstant("momentum")
    training = poptorch.trainingModel(model, optimizer=opt)
    training(*_batches(1)[0])
    opt.param_groups[0]["momentum"] = 0.5
    with pytest.raises(poptorch.Error, match="momentum of param group 0 is constant.*"
                                             "markAsVariable"):
        training.setOptimizer(opt)
    # constness is fixed at compilation: marking it variable afterwards changes nothing
    opt.variable_attrs.markAsVariable("momentum")
    with pytest.raises(poptorch.Error, match="momentum"):
        training.setOptimizer(opt)


def test_type_and_group_count_cannot_change():
    model = Net()
    training = poptorch.trainingModel(model, optimizer=poptorch.optim.SGD(_groups(model), lr=0.1))
    training(*_batches(1)[0])
    with pytest.raises(poptorch.Error, match="compiled with a SGD optimizer"):
        training.setOptimizer(poptorch.optim.Adam(model.parameters()))
    with pytest.raises(poptorch.Error, match="2 param group"):
        training.setOptimizer(poptorch.optim.SGD(model.parameters(), lr=0.1))


def test_set_optimizer_while_detached_applies_at_attach():
    model, reference, opt, eager_opt, training, rest = _start(
        lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9))
    training.detachFromDevice()
    for o in (opt, eager_opt):
        o.param_groups[0]["momentum"] = 0.3
    training.setOptimizer(opt)
    _steps(training, reference, eager_opt, rest)
    _assert_same(model, reference)


def test_param_group_changes_without_set_optimizer_do_not_reach_the_device():
    # PopTorch applies param_groups changes only through setOptimizer; a call with a new input
    # shape is refused and changes nothing (it does not compile again and pick them up)
    model, reference, opt, eager_opt, training, rest = _start(
        lambda m: poptorch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9))
    opt.param_groups[0].update(momentum=0.1, lr=1.0)
    with pytest.raises(poptorch.Error, match="Shape mismatch"):
        training(rest[0][0][:2], rest[0][1][:2])
    _steps(training, reference, eager_opt, rest)
    _assert_same(model, reference)
