"""PopTorch user guide, weights and checkpoints: compiling ahead with ``compile``, saving the
trained ``state_dict`` (and the optimiser's) with ``torch.save``, detaching and re-attaching,
resuming from a checkpoint in a new wrapper, and ``copyWeightsToDevice`` after host edits.

``import poptorch`` became ``import xlgraph.poptorch as poptorch``.
"""
import torch

import xlgraph.poptorch as poptorch


class Classifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 12)
        self.fc2 = torch.nn.Linear(12, 3)
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, labels=None):
        out = self.fc2(torch.relu(self.fc1(x)))
        if labels is None:
            return out
        return out, self.loss(out, labels)


torch.manual_seed(0)
model = Classifier()
x, labels = torch.randn(8, 6), torch.randint(0, 3, (8,))
optimizer = poptorch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
training_model = poptorch.trainingModel(model, optimizer=optimizer)
training_model.compile(x, labels)     # compile now, without running a step
for _ in range(3):
    training_model(x, labels)
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "checkpoint.pt")
training_model.detachFromDevice()

# Resume from the checkpoint in a new module, optimiser and wrapper ...
checkpoint = torch.load("checkpoint.pt")
resumed = Classifier()
resumed.load_state_dict(checkpoint["model"])
resumed_optimizer = poptorch.optim.SGD(resumed.parameters(), lr=0.1, momentum=0.9)
resumed_optimizer.load_state_dict(checkpoint["optimizer"])
resumed_model = poptorch.trainingModel(resumed, optimizer=resumed_optimizer)
resumed_losses = [float(resumed_model(x, labels)[1]) for _ in range(3)]
resumed_model.detachFromDevice()

# ... and carry on with the first one: it attaches again at its next call.
continued_losses = [float(training_model(x, labels)[1]) for _ in range(3)]
print(resumed_losses, continued_losses)
training_model.detachFromDevice()

# Host edits reach an inference model through copyWeightsToDevice.
inference_model = poptorch.inferenceModel(model.eval())
before = inference_model(x)
with torch.no_grad():
    model.fc2.bias.add_(1.0)
inference_model.copyWeightsToDevice()
after = inference_model(x)
