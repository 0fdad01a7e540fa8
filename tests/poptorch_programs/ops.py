"""PopTorch user guide, PopTorch's own operations: a layer run on the CPU (``poptorch.CPU``),
``MultiConv``, ``serializedMatMul``, ``nop``, ``for_loop`` and ``NameScope``, in one inference
model and (without ``for_loop``, which PopTorch refuses in training) one training model; a
``forward`` with an IPU-only path (``isRunningOnIpu``).

``import poptorch`` became ``import xlgraph.poptorch as poptorch``.
"""
import torch
import torch.nn as nn

import xlgraph.poptorch as poptorch


class Network(nn.Module):
    def __init__(self):
        super().__init__()
        self.convA = nn.Conv2d(1, 4, 5)
        self.convB = nn.Conv2d(1, 4, 5)
        self.cpu = poptorch.CPU(self.my_cpu_op, "MyCPUOp")
        self.fc = nn.Linear(16, 6)

    def my_cpu_op(self, x):
        return x * 2.0

    def features(self, x):
        with poptorch.MultiConv():
            a = self.convA(x)
            b = self.convB(x)
        out = self.cpu(a + b)          # runs on the host in PopTorch
        out = nn.functional.adaptive_avg_pool2d(out, 2).flatten(1)
        with poptorch.NameScope("head"):
            out = poptorch.serializedMatMul(
                out, self.fc.weight.t(), poptorch.MatMulSerializationMode.OutputChannels, 2)
            return poptorch.nop(out + self.fc.bias)

    def forward(self, x):
        def body(t):
            return torch.tanh(t) * 1.5
        return poptorch.for_loop(3, body, [self.features(x)])[0]


class IpuOrHost(nn.Module):
    def forward(self, x):
        if poptorch.isRunningOnIpu():
            return x * 2.0   # the IPU path
        return x * 3.0       # the host path


class TrainingNetwork(Network):
    def forward(self, x, labels):
        out = self.features(x)   # for_loop is for inference models only
        return out, nn.functional.cross_entropy(out, labels)


torch.manual_seed(0)
x = torch.randn(4, 1, 12, 12)
labels = torch.randint(0, 6, (4,))

model = Network()
model.cpu.registerPersistentData()
out = poptorch.inferenceModel(model)(x)
ipu_or_host = poptorch.inferenceModel(IpuOrHost())(x)

training_model_cpu = TrainingNetwork()
initial = {k: v.clone() for k, v in training_model_cpu.state_dict().items()}
training_model = poptorch.trainingModel(
    training_model_cpu, optimizer=torch.optim.SGD(training_model_cpu.parameters(), lr=0.1))
losses = [float(training_model(x, labels)[1]) for _ in range(3)]
print(losses)
