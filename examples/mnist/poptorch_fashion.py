# ruff: noqa  (the tutorial's code is kept verbatim)
"""The "Introduction to PopTorch" Fashion-MNIST walkthrough (seed 001), unchanged but for its
imports, its command line and where it writes.

``import poptorch`` became ``import xlgraph.poptorch as poptorch``; ``torchvision`` and
``sklearn.metrics`` fall back to ``xlgraph.vision`` and ``xlgraph.vision.metrics`` when they are
not installed, and tqdm comes from ``xlgraph.progress`` (bars only on a terminal). The files the
tutorial writes in the working directory (``sample_images.png``, ``classifier.pth``,
``confusion_matrix.png``, ``image_before_after.png``) go to ``--output-dir``. The last part
classifies the tutorial's own photo, ``--image`` (``images/trousers.jpg``); when that file is
absent it is skipped with one line. Run: ``python examples/mnist/poptorch_fashion.py``.
"""

import os

import cli

parser = cli.make_parser("poptorch_fashion",
                         "Introduction to PopTorch (Fashion-MNIST) on xlgraph.poptorch",
                         epochs=5, batch_size=16)
parser.add_argument("--image", default=os.path.join("images", "trousers.jpg"),
                    help="photo to classify after training (skipped when absent)")
args = parser.parse_args()
os.makedirs(args.output_dir, exist_ok=True)
output_dir = str(args.output_dir)

import torch
import xlgraph.poptorch as poptorch
try:
    import torchvision
except ImportError:  # torchvision is not installed: xlgraph's stand-in
    import xlgraph.vision as torchvision
import torch.nn as nn
import matplotlib.pyplot as plt
from xlgraph.progress import tqdm

# Set torch random seed for reproducibility
torch.manual_seed(42)

transform = torchvision.transforms.Compose(
    [
        torchvision.transforms.ToTensor(),
        torchvision.transforms.Normalize((0.5,), (0.5,)),
    ]
)

train_dataset = torchvision.datasets.FashionMNIST(
    args.data_dir, transform=transform, download=True, train=True
)

test_dataset = torchvision.datasets.FashionMNIST(
    args.data_dir, transform=transform, download=True, train=False
)

classes = (
    "T-shirt",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)

plt.figure(figsize=(30, 15))
for i, (image, label) in enumerate(train_dataset):
    if i == 15:
        break
    image = (image / 2 + 0.5).numpy()  # reverse transformation
    ax = plt.subplot(5, 5, i + 1)
    ax.set_title(classes[label])
    plt.imshow(image[0])

plt.savefig(os.path.join(output_dir, "sample_images.png"))

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
        self.log_softmax = nn.LogSoftmax(dim=1)
        self.loss = nn.NLLLoss()

    def forward(self, x, labels=None):
        x = self.pool(self.relu(self.conv1(x)))
        x = self.norm(self.relu(self.conv2(x)))
        x = torch.flatten(x, start_dim=1)
        x = self.relu(self.fc1(x))
        x = self.log_softmax(self.fc2(x))
        # The model is responsible for the calculation
        # of the loss when using an IPU. We do it this way:
        if self.training:
            return x, self.loss(x, labels)
        return x


model = ClassificationModel()
model.train()

opts = poptorch.Options()

train_dataloader = poptorch.DataLoader(
    opts, train_dataset, batch_size=args.batch_size, shuffle=True, num_workers=20
)

optimizer = poptorch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)

poptorch_model = poptorch.trainingModel(model, options=opts, optimizer=optimizer)

epochs = args.epochs
for epoch in tqdm(range(epochs), desc="epochs"):
    total_loss = 0.0
    for data, labels in tqdm(train_dataloader, desc="batches", leave=False):
        output, loss = poptorch_model(data, labels)
        total_loss += loss

poptorch_model.detachFromDevice()

torch.save(model.state_dict(), os.path.join(output_dir, "classifier.pth"))

model = model.eval()

poptorch_model_inf = poptorch.inferenceModel(model, options=opts)

test_dataloader = poptorch.DataLoader(opts, test_dataset, batch_size=32, num_workers=10)

predictions, labels = [], []
for data, label in test_dataloader:
    predictions += poptorch_model_inf(data).data.max(dim=1).indices
    labels += label

poptorch_model_inf.detachFromDevice()

try:
    from sklearn.metrics import accuracy_score, confusion_matrix, ConfusionMatrixDisplay
except ImportError:  # scikit-learn is not installed: xlgraph's stand-in
    from xlgraph.vision.metrics import accuracy_score, confusion_matrix, ConfusionMatrixDisplay

print(f"Eval accuracy: {100 * accuracy_score(labels, predictions):.2f}%")
cm = confusion_matrix(labels, predictions)
cm_plot = ConfusionMatrixDisplay(cm, display_labels=classes).plot(
    xticks_rotation="vertical"
)

cm_plot.figure_.savefig(os.path.join(output_dir, "confusion_matrix.png"))

model = ClassificationModel()
model.load_state_dict(torch.load(os.path.join(output_dir, "classifier.pth")))
model.eval()

poptorch_model = poptorch.inferenceModel(model, options=poptorch.Options())

from PIL import Image, ImageOps

if not os.path.isfile(args.image):
    print(f"{args.image} not found: skipped classifying it (pass --image PATH)")
    raise SystemExit(0)

img = Image.open(args.image).resize((28, 28))
img = ImageOps.grayscale(img)

if img.getpixel((1, 1)) > 200:
    img = ImageOps.invert(img)

transform = torchvision.transforms.Compose(
    [
        torchvision.transforms.ToTensor(),
        torchvision.transforms.Normalize((0.5,), (0.5,)),
    ]
)

img_tensor = transform(img)

f, ax = plt.subplots(1, 2)
ax[0].imshow(Image.open(args.image))
ax[0].set_title("Original image")
img_transform = torchvision.transforms.ToPILImage()
ax[1].imshow((img_transform(img_tensor)).convert("RGBA"))
ax[1].set_title("Transformed image")

plt.savefig(os.path.join(output_dir, "image_before_after.png"))

img_tensor = img_tensor.unsqueeze(0)

output = poptorch_model(img_tensor)
print(output)

prediction_idx = int(output.argmax())

poptorch_model.detachFromDevice()

print("IPU predicted class:", classes[prediction_idx])

model = ClassificationModel()
model.load_state_dict(torch.load(os.path.join(output_dir, "classifier.pth")))
model.eval()

output = model(img_tensor)
print("CPU predicted class:", classes[int(output.argmax())])

opts = (
    poptorch.Options()
    .deviceIterations(20)
    .replicationFactor(2)
    .randomSeed(123)
    .useIpuModel(True)
)
