"""PopTorch user guide, phased execution: blocks grouped in phases of stages, run with
``SerialPhasedExecution`` and ``ParallelPhasedExecution``, in training.

``import poptorch`` became ``import xlgraph.poptorch as poptorch``.
"""
import torch

import xlgraph.poptorch as poptorch

N = 8


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(N, N) for _ in range(6)])
        self.loss = torch.nn.MSELoss()

    def forward(self, x, target):
        for i, layer in enumerate(self.layers):
            with poptorch.Block(str(i)):
                x = torch.tanh(layer(x))
        return x, self.loss(x, target)


def serial_strategy():
    strategy = poptorch.SerialPhasedExecution(
        poptorch.Phase(poptorch.Stage("0"), poptorch.Stage("1")),
        poptorch.Phase(poptorch.Stage("2"), poptorch.Stage("3")),
        poptorch.Phase(poptorch.Stage("4"), poptorch.Stage("5")))
    strategy.phase(0).ipus(0, 1)
    strategy.phase(1).ipus(0, 1)
    strategy.phase(2).ipus(0, 1)
    strategy.setTensorsLiveness(poptorch.Liveness.OffChipAfterEachPhase)
    return strategy


def parallel_strategy():
    strategy = poptorch.ParallelPhasedExecution(
        poptorch.Phase(poptorch.Stage("0"), poptorch.Stage("1")),
        poptorch.Phase(poptorch.Stage("2"), poptorch.Stage("3")),
        poptorch.Phase(poptorch.Stage("4"), poptorch.Stage("5")))
    strategy.phase(0).ipus(0, 2)
    strategy.phase(1).ipus(1, 3)
    strategy.phase(2).ipus(0, 2)
    strategy.sendTensorsOffChipAfterFwd()
    return strategy


torch.manual_seed(0)
x, target = torch.randn(4, N), torch.randn(4, N)
models, losses = {}, {}
for name, strategy in (("serial", serial_strategy()), ("parallel", parallel_strategy())):
    opts = poptorch.Options()
    opts.setExecutionStrategy(strategy)
    torch.manual_seed(0)
    models[name] = Model()
    optimizer = torch.optim.SGD(models[name].parameters(), lr=0.05)
    training_model = poptorch.trainingModel(models[name], opts, optimizer)
    losses[name] = [float(training_model(x, target)[1]) for _ in range(10)]
    training_model.detachFromDevice()
print(losses)
