"""The finished script of "Running PyTorch on IPU" (seed 003, ``pytorch_ipu.py``) on xlgraph.

The seed shows this script as diffs against ``pytorch_gpu.py``; it is assembled from them:
``ClassificationModel`` (with its ``LogSoftmax(dim=0)``), the ``ModelwithLoss`` wrapper,
``poptorch.Options``, ``poptorch.DataLoader`` (batch 16, shuffled), ``poptorch.optim.SGD``
(lr 0.001, momentum 0.9), five epochs with a ``[Epoch NN]`` progress bar showing the loss, then
an ``inferenceModel`` evaluation printing ``Eval accuracy``. The diffs do not show the test
loader; it takes batches of 32 as in the PopTorch introduction (seed 001) whose model this is.
The batch size matters here: ``LogSoftmax(dim=0)`` normalises each class over the batch. Only
the import lines differ from PopTorch: ``xlgraph.poptorch``, without torchvision
``xlgraph.vision``, and tqdm from ``xlgraph.progress`` (bars only on a terminal); and the
settings are flags (``--help``). The seed reads ``../datasets``; ``--data-dir`` defaults to the
root every example shares. The script writes no file. Added to the tutorial: ``cli.EpochSplit``
times each epoch (the training calls, the waits for the next batch, the rest) and the script
prints the split after each epoch.
"""

import cli
import torch
import torch.nn as nn

import xlgraph.poptorch as poptorch
from xlgraph.progress import tqdm

try:
    import torchvision
except ImportError:  # torchvision is not installed: xlgraph's stand-in
    import xlgraph.vision as torchvision


class ClassificationModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 5, 3)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(5, 12, 5)
        self.norm = nn.GroupNorm(3, 12)
        self.fc1 = nn.Linear(972, 100)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(100, 10)
        self.log_softmax = nn.LogSoftmax(dim=0)

    def forward(self, x):
        x = self.pool(self.relu(self.conv1(x)))
        x = self.norm(self.relu(self.conv2(x)))
        x = torch.flatten(x, start_dim=1)
        x = self.relu(self.fc1(x))
        x = self.log_softmax(self.fc2(x))

        return x


class ModelwithLoss(nn.Module):
    def __init__(self, model, criterion):
        super().__init__()
        self.model = model
        self.criterion = criterion

    def forward(self, x, labels=None):
        output = self.model(x)
        if labels is not None:
            loss = self.criterion(output, labels)
            return output, loss
        return output


if __name__ == "__main__":
    parser = cli.make_parser("poptorch_port", "Running PyTorch on IPU: the ported GPU script",
                             epochs=5, batch_size=16)
    parser.add_argument("--test-batch-size", type=int, default=32, help="test batch size")
    args = parser.parse_args()

    opts = poptorch.Options()

    transform = torchvision.transforms.Compose([
        torchvision.transforms.ToTensor(),
        torchvision.transforms.Normalize((0.5,), (0.5,)),
    ])
    train_dataset = torchvision.datasets.FashionMNIST(
        args.data_dir, transform=transform, download=True, train=True)
    test_dataset = torchvision.datasets.FashionMNIST(
        args.data_dir, transform=transform, download=True, train=False)
    train_dataloader = poptorch.DataLoader(opts,
                                           train_dataset,
                                           batch_size=args.batch_size,
                                           shuffle=True)
    test_dataloader = poptorch.DataLoader(opts, test_dataset, batch_size=args.test_batch_size)

    criterion = nn.CrossEntropyLoss()
    model = ClassificationModel()
    model.train()
    optimizer = poptorch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
    model = ModelwithLoss(model, criterion)
    training_model = poptorch.trainingModel(model,
                                            options=opts,
                                            optimizer=optimizer)

    epochs = args.epochs
    split = cli.EpochSplit()  # not in the tutorial: where each epoch's time goes
    for epoch in range(1, epochs + 1):
        bar = tqdm(split.batches(train_dataloader), desc=f"[Epoch {epoch:02d}]")
        for data, labels in bar:
            with split.step():
                output, loss = training_model(data, labels)
            bar.set_postfix({"Loss": torch.mean(loss).item()})
        print(f"[Epoch {epoch:02d}] {split.summary()}")
    training_model.detachFromDevice()

    model.eval()
    inference_model = poptorch.inferenceModel(model, options=opts)
    correct = total = 0
    for data, labels in test_dataloader:
        output = inference_model(data)
        correct += (output.argmax(dim=1) == labels).sum().item()
        total += labels.size(0)
    inference_model.detachFromDevice()
    print(f"Eval accuracy: {100 * correct / total:.2f}%")
