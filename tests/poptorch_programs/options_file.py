"""PopTorch user-guide style: options read from a file, the execution strategy included.

``import poptorch`` became ``import xlgraph.poptorch as poptorch``; the rest is as a user
writes it. The file holds the calls the program would make, one per line.
"""
import os

import torch

import xlgraph.poptorch as poptorch

os.makedirs("tmp", exist_ok=True)
with open("tmp/poptorch.conf", "w") as f:
    f.write("deviceIterations(2)\n"
            "setExecutionStrategy(poptorch.ShardedExecution())\n"
            "replicationFactor(1)\n"
            "Training.gradientAccumulation(1)\n"
            "outputMode(poptorch.OutputMode.All)\n"
            "Precision.setPartialsType(torch.float)\n"
            "randomSeed(42)  # seeds are ints\n")

opts = poptorch.Options()
opts.loadFromFile("tmp/poptorch.conf")


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)


model = Model()
poptorch_model = poptorch.inferenceModel(model, opts)
x = torch.randn(6, 4)
out = poptorch_model(x)
print(out.shape)
