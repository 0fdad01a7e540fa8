"""PopTorch user guide, ``trainingModel``: a model that returns its loss, trained on the IPU,
then run on the host with the trained weights; a training and an inference model of one module.

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

# Wrap the model in our PopTorch annotation wrapper (SGD, lr=0.01 by default).
poptorch_model = poptorch.trainingModel(model)

# Some dummy inputs.
input = torch.randn(10)
target = torch.randn(10)

losses = []
for _ in range(200):
    # Each call runs the forward pass, the loss, the backward pass and the update.
    poptorch_out, loss = poptorch_model(input, target)
    losses.append(float(loss))
print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f}")

# Copy the trained weights from the IPU back into the host model.
poptorch_model.copyWeightsToHost()

# Execute the trained weights on host.
model.eval()
native_out = model(input)

# The last output was computed before the last update: close, not equal.
torch.testing.assert_close(native_out, poptorch_out, rtol=1e-2, atol=1e-2)

# Training and inference models of one module share its weights.
torch.manual_seed(1)
shared = ExampleModelWithLoss()
training_model = poptorch.trainingModel(shared)
# PopTorch traces the training flag the module has when it is wrapped.
shared_inference = poptorch.inferenceModel(shared.eval())
for _ in range(5):
    training_model(input, target)
trained_out = shared_inference(input)   # sees the 5 updates
