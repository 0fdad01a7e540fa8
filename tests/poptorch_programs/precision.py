"""PopTorch user guide, half precision: a float16 model (``model.half()``) with float16 inputs,
the ``opts.Precision`` settings, and float16 training.

``import poptorch`` became ``import xlgraph.poptorch as poptorch``.
"""
import torch

import xlgraph.poptorch as poptorch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x, target=None):
        out = self.fc2(torch.relu(self.fc1(x)))
        if target is None:
            return out
        return out, torch.nn.functional.mse_loss(out, target)


opts = poptorch.Options()
opts.Precision.setPartialsType(torch.half)
opts.Precision.halfFloatCasting(poptorch.HalfFloatCastingBehavior.HalfUpcastToFloat)
opts.Precision.runningStatisticsAlwaysFloat(True)
opts.Precision.enableStochasticRounding(False)

torch.manual_seed(0)
x = torch.randn(6, 8).half()
target = torch.randn(6, 4).half()

model = Model().half()
out = poptorch.inferenceModel(model, opts)(x)
print(out.dtype, out[0])

trained = Model().half()
initial = {k: v.clone() for k, v in trained.state_dict().items()}
training_model = poptorch.trainingModel(
    trained, opts, torch.optim.SGD(trained.parameters(), lr=0.05))
losses = [training_model(x, target)[1] for _ in range(5)]
print([float(loss) for loss in losses])
