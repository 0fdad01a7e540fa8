"""A ``poptorch.optim`` optimiser's state as PopTorch keeps it: ``ipu_state`` and ``ipu_param``
in ``state_dict()``, a torch state dict refused by ``load_state_dict``, loaded entries read back
as loaded until the next run, and ``copy.copy`` keeping PopTorch's attributes; training resumed
from the state matches an uninterrupted run."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import xlgraph.poptorch as poptorch  # noqa: E402


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, x, y):
        out = self.lin(x)
        return out, nn.functional.mse_loss(out, y)


def _setup():
    torch.manual_seed(0)
    net = Net()
    opt = poptorch.optim.Adam([{"params": [net.lin.weight]},
                               {"params": [net.lin.bias], "lr": 0.5}], lr=1e-2)
    return net, opt, torch.randn(4, 3), torch.randn(4, 2)


def test_state_dict_has_ipu_state_and_ipu_param_once_compiled():
    net, opt, x, y = _setup()
    before = opt.state_dict()
    assert before["ipu_state"] is None and before["ipu_param"] is None
    assert before["param_groups"][1]["lr"] == 0.5
    model = poptorch.trainingModel(net, optimizer=opt)
    model.compile(x, y)
    state = opt.state_dict()
    assert {"optimizer.exp_avg.lin.weight", "optimizer.group1.exp_avg_sq.lin.bias"} <= \
        set(state["ipu_state"])
    assert float(state["ipu_param"]["learningRate___specific___lin.bias"]) == 0.5
    assert float(state["ipu_param"]["learningRate___specific___lin.weight"]) == \
        pytest.approx(1e-2)
    opt.param_groups[1]["lr"] = 0.25
    model.setOptimizer(opt)
    model(x, y)
    assert float(opt.state_dict()["ipu_param"]["learningRate___specific___lin.bias"]) == 0.25


def test_load_state_dict_refuses_empty_and_torch_state_dicts():
    net, opt, x, y = _setup()
    poptorch.trainingModel(net, optimizer=opt)(x, y)
    with pytest.raises(RuntimeError, match=r"^Cannot load optimizer state dictionary because it "
                                           r"is empty\.$"):
        opt.load_state_dict({})
    torch_state = torch.optim.Adam([{"params": [net.lin.weight]},
                                    {"params": [net.lin.bias]}]).state_dict()
    with pytest.raises(RuntimeError, match=r"^Only IPU optimizer states can be loaded onto the "
                                           r"IPU\.$"):
        opt.load_state_dict(torch_state)


def test_loaded_state_reads_back_as_loaded_until_the_next_run():
    net, opt, x, y = _setup()
    model = poptorch.trainingModel(net, optimizer=opt)
    model(x, y)
    state = opt.state_dict()
    partial = {**state, "ipu_state": {"optimizer.step": torch.tensor(7.0)}}
    opt.load_state_dict(partial)
    assert set(opt.state_dict()["ipu_state"]) == {"optimizer.step"}
    model(x, y)
    after = opt.state_dict()["ipu_state"]
    assert set(after) == set(state["ipu_state"]) and float(after["optimizer.step"]) == 8.0


def test_a_copy_keeps_poptorch_attributes_and_state_and_drives_the_model():
    net, opt, x, y = _setup()
    opt = poptorch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, loss_scaling=2.0)
    opt.variable_attrs.markAsVariable("momentum")
    model = poptorch.trainingModel(net, optimizer=opt)
    model(x, y)
    clone = copy.copy(opt)
    assert clone.loss_scaling == 2.0 and not clone.variable_attrs.isConstant("momentum")
    assert clone.has_state() == opt.has_state()
    clone.param_groups[0]["lr"] = 0.05
    model.setOptimizer(clone)
    reference = copy.deepcopy(net)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
    ref_opt.load_state_dict(_momentum_of(model, reference, ref_opt))
    model(x, y)
    ref_opt.zero_grad()
    nn.functional.mse_loss(reference.lin(x), y).backward()
    ref_opt.step()
    torch.testing.assert_close(net.lin.weight.detach(), reference.lin.weight.detach())


def _momentum_of(model, reference, ref_opt):
    """torch's SGD state holding the momentum buffers the device has now."""
    state = model.read_optimizer_state()
    sd = ref_opt.state_dict()
    sd["state"] = {i: {"momentum_buffer": state[f"optimizer.momentum_buffer.{name}"]}
                   for i, (name, _) in enumerate(reference.named_parameters())}
    return sd
