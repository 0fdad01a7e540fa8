"""PopTorch's optimiser options as a user sets them: ``bias_correction`` of ``AdamW`` and
``LAMB`` (both settings, against torch's update written out, and a numpy LAMB), and
``VariableAttributes``' allowed-attribute checks."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
poptorch = pytest.importorskip("xlgraph.poptorch")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(3, 2)

    def forward(self, x, y):
        out = self.fc(x)
        return out, nn.functional.mse_loss(out, y)


def _adam_steps(params, grads_of, steps, lr, betas, eps, wd, correct, lamb=False):
    """Adam-family updates written out in numpy (decoupled decay for AdamW; LAMB's trust
    ratio), each step's gradients from ``grads_of(params)``."""
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    for t in range(1, steps + 1):
        grads = grads_of(params)
        new = []
        for i, (p, g) in enumerate(zip(params, grads)):
            m[i] = betas[0] * m[i] + (1 - betas[0]) * g
            v[i] = betas[1] * v[i] + (1 - betas[1]) * g * g
            bc1 = 1 - betas[0] ** t if correct else 1.0
            bc2 = 1 - betas[1] ** t if correct else 1.0
            if lamb:
                u = (m[i] / bc1) / (np.sqrt(v[i] / bc2) + eps) + wd * p
                r1, r2 = np.linalg.norm(p), np.linalg.norm(u)
                trust = r1 / r2 if r1 > 0 and r2 > 0 else 1.0
                new.append(p - lr * trust * u)
            else:
                p = p * (1 - lr * wd)
                new.append(p - lr / bc1 * m[i] / (np.sqrt(v[i]) / np.sqrt(bc2) + eps))
        params = new
    return params


def _torch_grads(x, y):
    def grads_of(params):
        w, b = (torch.tensor(p, dtype=torch.float32, requires_grad=True) for p in params)
        nn.functional.mse_loss(x @ w.T + b, y).backward()
        return [w.grad.numpy(), b.grad.numpy()]
    return grads_of


@pytest.mark.parametrize("correct", [True, False])
@pytest.mark.parametrize("kind", ["AdamW", "LAMB"])
def test_bias_correction_of_adamw_and_lamb(kind, correct):
    net = Net()
    start = [net.fc.weight.detach().numpy().copy(), net.fc.bias.detach().numpy().copy()]
    opt = getattr(poptorch.optim, kind)(net.parameters(), lr=0.05, betas=(0.8, 0.9), eps=1e-6,
                                        weight_decay=0.1, bias_correction=correct)
    model = poptorch.trainingModel(net, optimizer=opt)
    torch.manual_seed(1)
    x, y = torch.randn(4, 3), torch.randn(4, 2)
    for _ in range(3):
        model(x, y)
    want = _adam_steps(start, _torch_grads(x, y), 3, 0.05, (0.8, 0.9), 1e-6, 0.1, correct,
                       lamb=kind == "LAMB")
    np.testing.assert_allclose(net.fc.weight.detach().numpy(), want[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(net.fc.bias.detach().numpy(), want[1], rtol=1e-4, atol=1e-5)


def test_adamw_with_correction_is_torchs_adamw():
    net, ref = Net(), Net()
    opt = poptorch.optim.AdamW(net.parameters(), lr=0.05, bias_correction=True)
    model = poptorch.trainingModel(net, optimizer=opt)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=0.05)
    x, y = torch.randn(4, 3), torch.randn(4, 2)
    for _ in range(2):
        model(x, y)
        ref_opt.zero_grad()
        ref(x, y)[1].backward()
        ref_opt.step()
    torch.testing.assert_close(net.fc.weight.detach(), ref.fc.weight.detach())


def test_variable_attributes_check_the_optimizers_attributes():
    opt = poptorch.optim.SGD(Net().parameters(), lr=0.1, momentum=0.9)
    attrs = opt.variable_attrs
    assert {"lr", "momentum", "dampening", "weight_decay", "nesterov", "loss_scaling",
            "velocity_scaling"} <= set(attrs._allowed_attributes)
    assert not attrs.isConstant("momentum") and attrs.isConstant("dampening")
    attrs.markAsConstant("momentum")
    assert attrs.isConstant("momentum") and "momentum" not in attrs._variable_attributes
    attrs.markAsVariable("dampening")
    assert not attrs.isConstant("dampening")
    for bad in (attrs.isConstant, attrs.markAsConstant, attrs.markAsVariable):
        with pytest.raises(ValueError, match="Unknown attribute 'betas'"):
            bad("betas")
    with pytest.raises(ValueError, match="lr is always variable"):
        attrs.markAsConstant("lr")
    adam = poptorch.optim.LAMB(Net().parameters(), bias_correction=False)
    assert "max_weight_norm" in adam.variable_attrs._allowed_attributes
    assert adam.variable_attrs.isConstant("betas")
