"""Replica-grouped parameters (``param.replicaGrouping``), each replica group simulated by eager
torch: the groups of every ``CommGroupType``, grouped optimiser state (momentum), inference,
host copies one value per group, and the errors for a grouping that does not fit."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
poptorch = pytest.importorskip("xlgraph.poptorch")


class Linear(torch.nn.Module):
    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.W = torch.nn.Parameter(weight.clone())
        self.b = torch.nn.Parameter(torch.zeros(3))  # shared by every replica

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = x @ self.W + self.b
        return z, poptorch.identity_loss((z - 1.0) ** 2, reduction="mean")


def _options(replicas: int) -> poptorch.Options:
    return poptorch.Options().replicationFactor(replicas).outputMode(poptorch.OutputMode.All)


@pytest.mark.parametrize("kind,shards,replicas,groups", [
    (poptorch.CommGroupType.Orthogonal, 2, 4, [[0, 2], [1, 3]]),
    (poptorch.CommGroupType.Orthogonal, 2, 8, [[0, 4], [1, 5], [2, 6], [3, 7]]),
    (poptorch.CommGroupType.Orthogonal, 4, 8, [[0, 2, 4, 6], [1, 3, 5, 7]]),
    (poptorch.CommGroupType.Consecutive, 2, 8, [[0, 1], [2, 3], [4, 5], [6, 7]]),
    (poptorch.CommGroupType.NoGrouping, 0, 2, [[0], [1]]),
])
def test_each_group_trains_its_own_weight_with_momentum(kind, shards, replicas, groups):
    torch.manual_seed(0)
    w = torch.randn(len(groups), 2, 3)
    model = Linear(w)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    training = poptorch.trainingModel(model, _options(replicas), opt)
    model.W.replicaGrouping(kind, shards, poptorch.VariableRetrievalMode.OnePerGroup)
    x = torch.randn(replicas * 2, 2)
    for _ in range(3):
        training(x)
    training.copyWeightsToHost()
    # eager: replica r's loss on its rows; each group's W gets its replicas' mean gradient, the
    # shared bias the mean over all replicas
    ws = [torch.nn.Parameter(w[g].clone()) for g in range(len(groups))]
    b = torch.nn.Parameter(torch.zeros(3))
    eager = torch.optim.SGD([*ws, b], lr=0.1, momentum=0.9)
    rows = x.view(replicas, 2, 2)
    owner = {r: g for g, members in enumerate(groups) for r in members}
    for _ in range(3):
        eager.zero_grad()
        loss = sum(((rows[r] @ ws[owner[r]] + b - 1.0) ** 2).mean() for r in range(replicas))
        (loss / replicas).backward()
        for g, members in enumerate(groups):  # a group's mean, not the mean over all replicas
            ws[g].grad *= replicas / len(members)
        eager.step()
    assert model.W.shape == w.shape
    for g in range(len(groups)):
        torch.testing.assert_close(model.W[g].detach(), ws[g].detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(model.b.detach(), b.detach(), rtol=1e-5, atol=1e-6)


def test_inference_uses_each_replicas_group_and_host_edits_reach_the_device():
    w = torch.stack([torch.eye(2, 3), 2 * torch.eye(2, 3)])
    model = Linear(w)
    model.W.replicaGrouping(poptorch.CommGroupType.Consecutive, 2,
                            poptorch.VariableRetrievalMode.AllReplicas)
    inference = poptorch.inferenceModel(model, _options(4))
    x = torch.randn(8, 2)
    out, _ = inference(x)
    rows = x.view(4, 2, 2)
    want = torch.cat([rows[r] @ w[r // 2] for r in range(4)])
    torch.testing.assert_close(out, want)
    with torch.no_grad():
        model.W[1].mul_(-1.0)
    inference.copyWeightsToDevice()
    out, _ = inference(x)
    torch.testing.assert_close(out[4:], -want[4:])
    torch.testing.assert_close(out[:4], want[:4])


@pytest.mark.parametrize("shape,kind,shards,match", [
    ((3, 2, 3), poptorch.CommGroupType.Consecutive, 2,
     r"'W'.*makes 2 groups of 4 replicas, so its first dimension must be 2.*\(3, 2, 3\)"),
    ((2, 2, 3), poptorch.CommGroupType.Consecutive, 3, r"'W'.*replicaGrouping\(Consecutive, 3\) "
                                                        r"does not group replicationFactor\(4\)"),
    ((2, 2, 3), poptorch.CommGroupType.Orthogonal, 3, r"'W'.*replicaGrouping\(Orthogonal, 3\) "
                                                       r"does not group replicationFactor\(4\): "
                                                       r"the group size 3 must divide 4"),
    ((2, 2, 3), poptorch.CommGroupType.Orthogonal, 1,  # 4 groups of one replica
     r"makes 4 groups of 4 replicas, so its first dimension must be 4"),
])
def test_a_grouping_that_does_not_fit_is_refused_naming_the_parameter(shape, kind, shards, match):
    model = Linear(torch.zeros(shape))
    model.W.replicaGrouping(kind, shards, poptorch.VariableRetrievalMode.OnePerGroup)
    with pytest.raises(poptorch.Error, match=match):
        poptorch.inferenceModel(model, _options(4))(torch.zeros(8, 2))
    with pytest.raises(poptorch.Error, match="shards must be a whole number"):
        model.W.replicaGrouping(kind, "2", poptorch.VariableRetrievalMode.OnePerGroup)
