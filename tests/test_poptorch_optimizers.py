"""PopTorch's optimiser options as a user sets them: ``bias_correction`` of ``AdamW`` (always
corrected, as PopTorch's bridge does) and ``LAMB`` (both settings, against torch's update written
out, and a numpy LAMB), LAMB's CPU ``step``, RMSprop's TensorFlow variant, the ``Running`` mean
strategy a float16 accumulator chooses, and ``VariableAttributes``' allowed-attribute checks."""

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
    # PopTorch maps AdamW(bias_correction=False) to PopART's Adam mode: it still corrects
    want = _adam_steps(start, _torch_grads(x, y), 3, 0.05, (0.8, 0.9), 1e-6, 0.1,
                       correct or kind == "AdamW", lamb=kind == "LAMB")
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


@pytest.mark.parametrize("correct", [True, False])
def test_lamb_steps_on_the_cpu_as_on_the_device(correct):
    torch.manual_seed(2)
    x, y = torch.randn(4, 3), torch.randn(4, 2)
    cpu, ipu = Net(), Net()
    start = [cpu.fc.weight.detach().numpy().copy(), cpu.fc.bias.detach().numpy().copy()]
    kwargs = dict(lr=0.05, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.1, bias_correction=correct)
    cpu_opt = poptorch.optim.LAMB(cpu.parameters(), **kwargs)
    model = poptorch.trainingModel(ipu, optimizer=poptorch.optim.LAMB(ipu.parameters(), **kwargs))
    for _ in range(3):
        cpu_opt.zero_grad()
        cpu(x, y)[1].backward()
        cpu_opt.step()
        model(x, y)
    want = _adam_steps(start, _torch_grads(x, y), 3, 0.05, (0.8, 0.9), 1e-6, 0.1, correct,
                       lamb=True)
    np.testing.assert_allclose(cpu.fc.weight.detach().numpy(), want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cpu.fc.bias.detach().numpy(), want[1], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ipu.fc.weight.detach(), cpu.fc.weight.detach(),
                               rtol=1e-4, atol=1e-5)
    assert cpu_opt.state[cpu.fc.weight]["step"] == 3


def test_lamb_cpu_step_clips_the_weight_norm_and_skips_parameters_without_gradients():
    w = nn.Parameter(torch.full((4,), 10.0))
    frozen = nn.Parameter(torch.ones(2))
    opt = poptorch.optim.LAMB([w, frozen], lr=0.1, weight_decay=0.0, max_weight_norm=1.0)
    w.grad = torch.tensor([1.0, -1.0, 2.0, 0.5])
    opt.step()
    # first step, corrected: the direction is sign(g) / (1 + eps) elementwise, norm 2
    direction = torch.sign(w.grad) / (1 + 1e-8)
    torch.testing.assert_close(w.detach(), 10.0 - 0.1 * (1.0 / direction.norm()) * direction)
    assert torch.equal(frozen.detach(), torch.ones(2)) and frozen not in opt.state


def _tf_rmsprop(w, grads, lr, alpha, eps, momentum):
    """TensorFlow's RMSprop written out: mean square from 1, eps inside the root, lr folded
    into the momentum buffer."""
    v, buf = torch.ones_like(w), torch.zeros_like(w)
    for g in grads:
        v = alpha * v + (1 - alpha) * g * g
        step = lr * g / torch.sqrt(v + eps)
        if momentum:
            buf = momentum * buf + step
            step = buf
        w = w - step
    return w


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_rmsprop_tf_variant_trains_as_tensorflow(momentum):
    torch.manual_seed(3)
    w0 = torch.randn(5)
    targets = torch.randn(3, 5)

    class Fit(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(w0.clone())

        def forward(self, t):
            return poptorch.identity_loss(((self.w - t) ** 2).sum(), reduction="none")

    net = Fit()
    opt = poptorch.optim.RMSprop(net.parameters(), lr=0.01, alpha=0.9, eps=1e-3,
                                 momentum=momentum, use_tf_variant=True)
    model = poptorch.trainingModel(net, optimizer=opt)
    weights, grads = w0.clone(), []
    for t in targets:
        grads.append(2 * (weights - t))
        weights = _tf_rmsprop(w0, grads, 0.01, 0.9, 1e-3, momentum)
        model(t)
    model.copyWeightsToHost()
    torch.testing.assert_close(net.w.detach(), weights, rtol=1e-5, atol=1e-6)
    plain = nn.Parameter(w0.clone())  # torch's own RMSprop differs: the variant is in force
    torch_opt = torch.optim.RMSprop([plain], lr=0.01, alpha=0.9, eps=1e-3, momentum=momentum)
    for t in targets:
        torch_opt.zero_grad()
        ((plain - t) ** 2).sum().backward()
        torch_opt.step()
    assert (plain.detach() - weights).abs().max() > 1e-3


@pytest.mark.parametrize("optimizer,strategy", [
    (lambda p: poptorch.optim.SGD(p, lr=0.1, accum_type=torch.float16), "Running"),
    (lambda p: poptorch.optim.Adam(p, lr=0.1, accum_type=torch.float16), "Running"),
    (lambda p: poptorch.optim.SGD(p, lr=0.1, accum_type=torch.float16,
                                  use_combined_accum=True), "Post"),
    (lambda p: poptorch.optim.SGD(p, lr=0.1, accum_type=torch.float32), "Post"),
])
def test_a_float16_accumulator_chooses_the_running_mean_over_the_users_frozen_post(
        optimizer, strategy):
    net = Net()
    opts = poptorch.Options()
    opts.Training.setMeanAccumulationAndReplicationReductionStrategy(
        poptorch.MeanReductionStrategy.Post)
    model = poptorch.trainingModel(net, opts, optimizer(net.parameters()))
    model(torch.randn(4, 3), torch.randn(4, 2))
    assert model.options.Training.meanAccumulationAndReplicationReductionStrategy == \
        getattr(poptorch.MeanReductionStrategy, strategy)


def test_set_optimizer_needing_the_running_mean_after_compilation_is_refused():
    net = Net()
    model = poptorch.trainingModel(net, optimizer=poptorch.optim.SGD(net.parameters(), lr=0.1))
    model(torch.randn(4, 3), torch.randn(4, 2))
    with pytest.raises(ValueError, match="Invalid optimizer: the new optimizer would require "
                                         "changing options.Training.meanAccumulationAndReplica"
                                         "tionReductionStrategy to poptorch.MeanReduction"
                                         "Strategy.Running but the executable is already "
                                         "compiled."):
        model.setOptimizer(poptorch.optim.SGD(net.parameters(), lr=0.1,
                                              accum_type=torch.float16))
