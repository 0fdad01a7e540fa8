"""Buffers as PopTorch treats them: ``updatableNamedBuffers`` naming the only buffers
``copyNamedBuffersToDevice`` uploads, a ``forward`` that deletes or rebinds a buffer or
parameter refused in PopTorch's words, and plain tensor attributes changed once on the host when
the model is traced."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import xlgraph.poptorch as poptorch  # noqa: E402


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.tensor(2.0))
        self.register_buffer("shift", torch.tensor(1.0))

    def forward(self, x):
        return x * self.scale + self.shift


def test_copy_named_buffers_uploads_only_the_updatable_ones():
    opts = poptorch.Options().updatableNamedBuffers(["scale"])
    model = poptorch.inferenceModel(Scaled(), opts)
    x = torch.ones(3)
    torch.testing.assert_close(model(x), x * 2 + 1)
    model.scale.copy_(model.scale + 1)
    model.shift.copy_(torch.tensor(10.0))
    model.copyNamedBuffersToDevice()
    device = model._compiled.session
    assert float(device.get_tensor_data(model._compiled.sync.variables["scale"])) == 3.0
    assert float(device.get_tensor_data(model._compiled.sync.variables["shift"])) == 1.0


def test_copy_named_buffers_needs_the_option_and_known_names():
    model = poptorch.inferenceModel(Scaled())
    model(torch.ones(3))
    with pytest.raises(poptorch.Error, match=r"^No named buffers marked as updatable via "
                                             r"updatableNamedBuffers option$"):
        model.copyNamedBuffersToDevice()
    opts = poptorch.Options().updatableNamedBuffers(["scale", "nope"])
    with pytest.raises(poptorch.Error, match="nope"):
        poptorch.inferenceModel(Scaled(), opts)(torch.ones(3))


class Deletes(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("y", torch.ones(2))
        self.w = nn.Parameter(torch.ones(2))

    def forward(self, x):
        del self.y
        return x * 2


class Rebinds(Deletes):
    def forward(self, x):
        self.y = x
        return x * 2


class RebindsParameter(Deletes):
    def forward(self, x):
        self.w = nn.Parameter(x)
        return x * 2


@pytest.mark.parametrize("cls,match", [
    (Deletes, r"^Buffer y is removed from the model when calling the forward method\.$"),
    (Rebinds, r"^Buffer y is reassigned within the model when calling the forward method\. "
              r"This is not supported\. Consider using self\.y\.copy_\(src\) to copy data from "
              r"a source tensor, where src is the name of the source tensor\.$"),
    (RebindsParameter, r"^Parameter w is reassigned within the model"),
])
def test_forward_may_not_delete_or_rebind_buffers_and_parameters(cls, match):
    model = cls()
    y, w = model.y, model.w
    with pytest.raises(poptorch.Error, match=match):
        poptorch.inferenceModel(model)(torch.zeros(2))
    assert model.y is y and model.w is w  # the module keeps its tensors


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.i = torch.tensor([0.0])

    def forward(self, x):
        self.i += 1
        return x + self.i


def test_a_plain_tensor_attribute_changes_once_on_the_host_at_tracing():
    counter = Counter()
    model = poptorch.inferenceModel(counter)
    x = torch.zeros(1)
    assert [model(x).tolist() for _ in range(3)] == [[1.0]] * 3
    assert counter.i.tolist() == [1.0]


class Normed(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(3)

    def forward(self, x):
        out = self.bn(x)
        return out, poptorch.identity_loss((out * out).sum(), reduction="sum")


def test_replicas_cannot_broadcast_buffers_a_training_model_changes():
    opts = poptorch.Options().replicationFactor(2)
    with pytest.raises(poptorch.Error, match=r"^PopTorch does not support broadcasting buffers\. "
                                             r".*poptorch\.Options\.broadcastBuffers\(False\)\.$"):
        poptorch.trainingModel(Normed(), opts)(torch.randn(8, 3))
    opts = poptorch.Options().replicationFactor(2).broadcastBuffers(False)
    out, _ = poptorch.trainingModel(Normed(), opts)(torch.randn(8, 3))
    assert out.shape == (8, 3)
    inference = poptorch.inferenceModel(Normed().eval(), poptorch.Options().replicationFactor(2))
    x = torch.randn(8, 3)
    torch.testing.assert_close(inference(x)[0], Normed().eval()(x)[0].detach())
