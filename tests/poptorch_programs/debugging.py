"""PopTorch user guide, debugging: ``poptorch.ipu_print_tensor`` in ``forward``, and tensors
anchored by name (``anchorTensor``) read back after a training step.

``import poptorch`` became ``import xlgraph.poptorch as poptorch``.
"""
import torch

import xlgraph.poptorch as poptorch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(10, 10)
        self.relu = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(10, 10)
        self.loss = torch.nn.MSELoss(reduction="mean")

    def forward(self, x, labels=None):
        out = self.fc2(self.relu(self.fc1(x)))
        # The result of the print must be used, or the print is removed with it.
        out = poptorch.ipu_print_tensor(out, "fc2 output")
        if self.training:
            return self.loss(out, labels)
        return out


torch.manual_seed(0)
model = Model()
input = torch.rand(10, 10)
label = torch.rand(10, 10)

opts = poptorch.Options()
opts.anchorTensor("grad_bias", "Gradient___fc2.bias")
opts.anchorTensor("update_weight", "UpdatedVar___fc2.weight")

poptorch_model = poptorch.trainingModel(model, opts)
poptorch_model(input, label)

tensor_names = poptorch_model.getTensorNames()
print([name for name in tensor_names if "fc2" in name])

grad = poptorch_model.getAnchoredTensor("grad_bias")
update = poptorch_model.getAnchoredTensor("update_weight")
print("bias gradient", grad)
