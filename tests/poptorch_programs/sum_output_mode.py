"""PopTorch user guide, ``sumAnchorReturnType``: ``OutputMode.Sum`` returns the sum of every
micro-batch's loss in a call, so the loop averages the loss over the epoch without reading
each one.

``import poptorch`` became ``import xlgraph.poptorch as poptorch``.
"""
import torch

import xlgraph.poptorch as poptorch


class ExampleDataset(torch.utils.data.Dataset):
    def __init__(self, shape, length):
        torch.manual_seed(0)
        self._labels = (torch.rand(length) > 0.5).long()
        self._data = torch.rand([length, *shape]) + self._labels.view(-1, 1, 1)

    def __len__(self):
        return len(self._labels)

    def __getitem__(self, index):
        return self._data[index], self._labels[index]


class ExampleModelWithLoss(torch.nn.Module):
    def __init__(self, data_shape, num_classes):
        super().__init__()
        self.fc = torch.nn.Linear(data_shape[0] * data_shape[1], num_classes)
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, target):
        fc = self.fc(x.flatten(1))
        return fc, self.loss(fc, target)


opts = poptorch.Options()
opts.deviceIterations(5)
opts.Training.gradientAccumulation(2)
opts.outputMode(poptorch.OutputMode.Sum)

training_data = poptorch.DataLoader(opts, dataset=ExampleDataset(shape=[3, 2], length=100),
                                    batch_size=2, shuffle=False, drop_last=True)
torch.manual_seed(0)
model = ExampleModelWithLoss(data_shape=[3, 2], num_classes=2)
initial = {k: v.clone() for k, v in model.state_dict().items()}
poptorch_model = poptorch.trainingModel(model, opts,
                                        torch.optim.SGD(model.parameters(), lr=0.2))

total_loss = 0.0
total_micro_batches = 0
call_losses = []
for data, labels in training_data:
    output, loss = poptorch_model(data, labels)   # loss: the sum over 5 x 2 micro-batches
    call_losses.append(loss)
    total_loss += float(loss)
    total_micro_batches += 5 * 2
print(f"Average loss: {total_loss / total_micro_batches:.4f}")
