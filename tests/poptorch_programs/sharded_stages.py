"""PopTorch user-guide style: a model split in blocks, placed by ``ShardedExecution``'s stages.

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
        self.softmax = torch.nn.Softmax(1)
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, labels):
        with poptorch.Block("A"):
            x = self.layer1(x)
        with poptorch.Block("B"):
            x = self.layer2(x)
        with poptorch.Block("C"):
            x = self.layer3(x)
            out = self.softmax(x)
        return out, self.loss(x, labels)


strategy = poptorch.ShardedExecution(poptorch.AutoStage.AutoIncrement)
strategy.stage("A").ipu(0)
strategy.stage("B").ipu(1)
strategy.stage("C").ipu(1)

opts = poptorch.Options().useIpuModel(True)
opts.setExecutionStrategy(strategy)

torch.manual_seed(0)
model = Network()
training_model = poptorch.trainingModel(model, opts, torch.optim.SGD(model.parameters(), lr=0.1))
x, labels = torch.randn(8, 5), torch.randint(0, 5, (8,))
losses = [float(training_model(x, labels)[1]) for _ in range(20)]
print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f}")
training_model.detachFromDevice()

inference_model = poptorch.inferenceModel(model, opts)
probabilities = inference_model(x, labels)[0]
print(probabilities.sum(1))
