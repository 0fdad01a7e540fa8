"""PopTorch user guide, batching: ``poptorch.DataLoader`` feeding a training model with
device iterations, replicas and gradient accumulation (synchronously and from a worker
process), then the model validated.

``import poptorch`` became ``import xlgraph.poptorch as poptorch``.
"""
import torch

import xlgraph.poptorch as poptorch


class ExampleDataset(torch.utils.data.Dataset):
    def __init__(self, shape, length):
        self._shape = shape
        self._length = length
        self._all_data = []
        self._all_labels = []
        torch.manual_seed(0)
        for _ in range(length):
            label = 1 if torch.rand(()) > 0.5 else 0
            data = torch.rand(self._shape) + label
            data[0] = -data[0]
            self._all_data.append(data)
            self._all_labels.append(label)

    def __len__(self):
        return self._length

    def __getitem__(self, index):
        return self._all_data[index], self._all_labels[index]


class ExampleModelWithLoss(torch.nn.Module):
    def __init__(self, data_shape, num_classes):
        super().__init__()
        self.fc = torch.nn.Linear(torch.prod(torch.tensor(data_shape)), num_classes)
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, target=None):
        reshaped = x.reshape([x.shape[0], -1])
        fc = self.fc(reshaped)
        if target is not None:
            return fc, self.loss(fc, target)
        return fc


model_batch_size = 2
opts = poptorch.Options()
opts.deviceIterations(2)
opts.replicationFactor(2)
opts.Training.gradientAccumulation(3)

dataset = ExampleDataset(shape=[3, 2], length=100)
training_data = poptorch.DataLoader(opts, dataset=dataset, batch_size=model_batch_size,
                                    shuffle=False, drop_last=True)
torch.manual_seed(0)
model = ExampleModelWithLoss(data_shape=[3, 2], num_classes=2)
initial = {k: v.clone() for k, v in model.state_dict().items()}
poptorch_model = poptorch.trainingModel(model, opts,
                                        torch.optim.SGD(model.parameters(), lr=0.5))
batches, losses = [], []
for data, labels in training_data:
    batches.append((data, labels))
    _, loss = poptorch_model(data, labels)
    losses.append(loss)
poptorch_model.detachFromDevice()

# The same batches from a worker process that loads ahead.
async_data = poptorch.DataLoader(opts, dataset=dataset, batch_size=model_batch_size,
                                 mode=poptorch.DataLoaderMode.Async)
async_batches = [(data.clone(), labels.clone()) for data, labels in async_data]
async_data.terminate()

# Validate with a batch of 10 per call and 5 device iterations.
val_opts = poptorch.Options().deviceIterations(5)
validation_data = poptorch.DataLoader(val_opts, dataset=dataset, batch_size=10)
inference_model = poptorch.inferenceModel(model.eval(), val_opts)
correct = 0
for data, labels in validation_data:
    correct += int((inference_model(data).argmax(1) == labels).sum())
print(f"{len(training_data)} training calls, accuracy {correct}%")
