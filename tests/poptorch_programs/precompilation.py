"""PopTorch user guide, precompilation: a model compiled without hardware for an offline IPU
target and exported with ``compileAndExport``, then loaded with ``poptorch.load`` (the model
comes from the file) or with ``loadExecutable`` (the user rebuilds the model).

``import poptorch`` became ``import xlgraph.poptorch as poptorch``.
"""
import torch

import xlgraph.poptorch as poptorch


class ExampleModelWithLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(10, 10)
        self.loss = torch.nn.MSELoss()

    def forward(self, x, target=None):
        fc = self.fc(x)
        if self.training:
            return fc, self.loss(fc, target)
        return fc


torch.manual_seed(0)
model = ExampleModelWithLoss()
input = torch.randn(4, 10)
target = torch.randn(4, 10)
filename = "model.poptorch"

opts = poptorch.Options()
# You don't need hardware to compile for the IPU
opts.useOfflineIpuTarget(2)
opts.deviceIterations(2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
poptorch_model = poptorch.trainingModel(model, opts, optimizer)
poptorch_model.compileAndExport(filename, input, target)

# Everything is in the file: the model, its weights, the options and the optimiser.
poptorch_model = poptorch.load(filename)
loaded_losses = [float(poptorch_model(input, target)[1]) for _ in range(3)]


def setIpuDevice(opts):
    opts.useIpuId(1)  # always use IPU 1


poptorch_model = poptorch.load(filename, edit_opts_fn=setIpuDevice)
poptorch_model(input, target)

# Without the model: the user builds the same model, options and optimiser again.
torch.manual_seed(0)
model = ExampleModelWithLoss()
poptorch.trainingModel(model, opts, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
                       ).compileAndExport(filename, input, target, export_model=False)
rebuilt = ExampleModelWithLoss()
rebuilt.load_state_dict(model.state_dict())
poptorch_model = poptorch.trainingModel(
    rebuilt, opts, torch.optim.SGD(rebuilt.parameters(), lr=0.1, momentum=0.5))
poptorch_model.loadExecutable(filename)
rebuilt_losses = [float(poptorch_model(input, target)[1]) for _ in range(3)]
print(loaded_losses, rebuilt_losses)
