"""PopTorch user guide, overlapping IO and tensor locations: inputs and outputs marked with
``set_overlap_for_input``/``set_overlap_for_output``, IO tiles, and where weights, activations,
optimiser state and accumulators live (``opts.TensorLocations``).

``import poptorch`` became ``import xlgraph.poptorch as poptorch``.
"""
import torch

import xlgraph.poptorch as poptorch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 6)

    def forward(self, x, target):
        x = poptorch.set_overlap_for_input(x, poptorch.OverlapMode.OverlapDeviceIterationLoop)
        out = torch.tanh(self.fc(x))
        loss = torch.nn.functional.mse_loss(out, target)
        out = poptorch.set_overlap_for_output(out, poptorch.OverlapMode.OverlapDeviceIterationLoop)
        return out, loss


opts = poptorch.Options()
opts.deviceIterations(4)
opts.outputMode(poptorch.OutputMode.All)
opts.TensorLocations.numIOTiles(32)
opts.TensorLocations.setWeightLocation(
    poptorch.TensorLocationSettings().minElementsForOffChip(4).useOnChipStorage(False))
opts.TensorLocations.setOptimizerLocation(
    poptorch.TensorLocationSettings().useOnChipStorage(False))
opts.TensorLocations.setActivationLocation(
    poptorch.TensorLocationSettings().useOnChipStorage(True))
opts.TensorLocations.setAccumulatorLocation(
    poptorch.TensorLocationSettings().useOnChipStorage(True))

torch.manual_seed(0)
model = Model()
initial = {k: v.clone() for k, v in model.state_dict().items()}
x, target = torch.randn(8, 6), torch.randn(8, 6)     # 4 device iterations of 2
training_model = poptorch.trainingModel(
    model, opts, torch.optim.SGD(model.parameters(), lr=0.1))
out, losses = training_model(x, target)             # 4 SGD steps, every output returned
print(out.shape, losses)
