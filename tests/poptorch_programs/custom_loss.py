"""PopTorch user guide, custom losses: a loss built from plain ops and marked with
``poptorch.identity_loss``, and two torch losses combined into the one loss PopTorch trains.

``import poptorch`` became ``import xlgraph.poptorch as poptorch``.
"""
import torch

import xlgraph.poptorch as poptorch


def custom_loss(output, target):
    # Mean squared error with a scale
    loss = output - target
    loss = loss * loss * 5
    return poptorch.identity_loss(loss, reduction="mean")


class ExampleModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(10, 10)

    def forward(self, x):
        return torch.sigmoid(self.fc(x))


class ExampleModelWithCustomLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.model = ExampleModel()

    def forward(self, input, target):
        out = self.model(input)
        return out, custom_loss(out, target)


class ExampleModelWithTwoLosses(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.model = ExampleModel()

    def forward(self, input, target):
        out = self.model(input)
        l1 = torch.nn.functional.l1_loss(out, target)
        mse = torch.nn.functional.mse_loss(out, target)
        # Two independent losses: identity_loss makes their sum the one loss.
        return out, poptorch.identity_loss(l1 + mse, reduction="sum")


torch.manual_seed(0)
input = torch.randn(8, 10)
target = torch.rand(8, 10)
models, losses = {}, {}
for cls in (ExampleModelWithCustomLoss, ExampleModelWithTwoLosses):
    torch.manual_seed(0)
    models[cls.__name__] = model = cls()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    poptorch_model = poptorch.trainingModel(model, optimizer=optimizer)
    losses[cls.__name__] = [float(poptorch_model(input, target)[1]) for _ in range(10)]
    poptorch_model.detachFromDevice()
    print(cls.__name__, losses[cls.__name__][0], "->", losses[cls.__name__][-1])
