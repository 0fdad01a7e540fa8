"""PopTorch user-guide style: weights grouped across replicas (``replica_grouped_weights.py``).

``import poptorch`` became ``import xlgraph.poptorch as poptorch``. Eight replicas in orthogonal
groups of two (``[0, 4] [1, 5] [2, 6] [3, 7]``), as in the guide: the weight has one value per
group (its first dimension, 8 / 2 = 4 entries), each replica computes with its group's value,
and training reduces each group's gradient over the group's replicas only.
"""
import torch

import xlgraph.poptorch as poptorch


class ModelWithLoss(torch.nn.Module):
    def __init__(self, W_init):  # noqa: N803 - the user guide's name
        super().__init__()
        self.W = torch.nn.Parameter(W_init)

    def forward(self, X):  # noqa: N803
        Z = X @ self.W  # noqa: N806
        return Z, poptorch.identity_loss(Z**2, reduction="mean")


torch.manual_seed(0)
replication_factor = 8
opts = poptorch.Options().replicationFactor(replication_factor)
opts.outputMode(poptorch.OutputMode.All)

group_size = 2
num_groups = replication_factor // group_size
# one 2x2 weight per group of replicas: the first dimension is the group
W_init = torch.stack([torch.eye(2) * (g + 1) for g in range(num_groups)])  # noqa: N816
model = ModelWithLoss(W_init.clone())
poptorch_model = poptorch.trainingModel(
    model, opts, optimizer=poptorch.optim.SGD(model.parameters(), lr=0.05))
poptorch_model.W.replicaGrouping(poptorch.CommGroupType.Orthogonal, group_size,
                                 poptorch.VariableRetrievalMode.OnePerGroup)

# one micro-batch of 3 rows per replica: replica r is in group r % 4
X = torch.randn(replication_factor * 3, 2)  # noqa: N816
outputs = []
for _ in range(3):
    Z, loss = poptorch_model(X)  # noqa: N816
    outputs.append(Z.clone())

trained_W = model.W.detach().clone()  # noqa: N816
print(trained_W.shape)  # torch.Size([4, 2, 2]): one weight per group
