"""PopTorch user guide, model parallelism: blocks marked inline with ``poptorch.BeginBlock``,
with the ``poptorch.BlockFunction`` decorator and with ``poptorch.Block.start``, stages of a
``PipelinedExecution`` (given as ``Stage`` objects and as block ids), ``AutoStage``,
``set_available_memory`` and ``recomputationCheckpoint``; trained with gradient accumulation.

``import poptorch`` became ``import xlgraph.poptorch as poptorch``.
"""
import torch

import xlgraph.poptorch as poptorch


class Network(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer1 = torch.nn.Linear(5, 10)
        self.layer2 = torch.nn.Linear(10, 5)
        self.layer3 = torch.nn.Linear(5, 5)
        self.layer4 = torch.nn.Linear(5, 5)
        self.act = torch.nn.ReLU()
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, labels):
        x = self.act(self.layer1(x))
        x = poptorch.recomputationCheckpoint(x)
        x = self.act(self.layer2(x))
        x = self.block_three(x)
        poptorch.Block.start("D")
        x = poptorch.set_available_memory(self.layer4(x), 0.3)
        return x, self.loss(x, labels)

    @poptorch.BlockFunction("C", ipu_id=2)
    def block_three(self, x):
        return self.act(self.layer3(x))


def network():
    torch.manual_seed(0)
    model = Network()
    # Inline annotations: layer1 and layer2 start blocks "A" and "B".
    model.layer1 = poptorch.BeginBlock(model.layer1, "A", ipu_id=0)
    model.layer2 = poptorch.BeginBlock(model.layer2, "B", ipu_id=1)
    return model


strategies = {
    "stages": poptorch.PipelinedExecution(poptorch.Stage("A", "B").ipu(0),
                                          poptorch.Stage("C").ipu(1), poptorch.Stage("D").ipu(2)),
    "ids": poptorch.PipelinedExecution("A", ["B", "C"], "D"),
    "auto": poptorch.PipelinedExecution(poptorch.AutoStage.AutoIncrement),
}
torch.manual_seed(1)
x, labels = torch.randn(24, 5), torch.randint(0, 5, (24,))
models, losses = {}, {}
for name, strategy in strategies.items():
    opts = poptorch.Options()
    # up to four stages (AutoIncrement: one per block); training adds three backward stages,
    # and PopTorch needs at least 2 x 4 - 1 = 7 accumulated micro-batches to fill them
    opts.Training.gradientAccumulation(8)
    opts.setExecutionStrategy(strategy)
    models[name] = model = network()
    training_model = poptorch.trainingModel(
        model, opts, torch.optim.SGD(model.parameters(), lr=0.1))
    losses[name] = [float(training_model(x, labels)[1]) for _ in range(5)]
    training_model.detachFromDevice()
print(losses)
