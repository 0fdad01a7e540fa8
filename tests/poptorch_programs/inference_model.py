"""PopTorch user guide, ``inferenceModel``: an image classifier (a small MobileNet-v2 style
network in place of torchvision's) run on the IPU and compared with native PyTorch.

``import poptorch`` became ``import xlgraph.poptorch as poptorch``.
"""
import torch
import torch.nn as nn

import xlgraph.poptorch as poptorch


class InvertedResidual(nn.Module):
    def __init__(self, channels, expand):
        super().__init__()
        hidden = channels * expand
        self.conv = nn.Sequential(
            nn.Conv2d(channels, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, channels, 1, bias=False), nn.BatchNorm2d(channels))

    def forward(self, x):
        return x + self.conv(x)


class MobileNet(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU6(),
            InvertedResidual(8, 4), InvertedResidual(8, 4))
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(8, num_classes))

    def forward(self, x):
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.classifier(x)


torch.manual_seed(0)
# Some dummy image sized input.
picture_of_a_cat_here = torch.randn([1, 3, 32, 32])

model = MobileNet()
for m in model.modules():   # running statistics as a trained network has them
    if isinstance(m, nn.BatchNorm2d):
        m.running_mean.uniform_(-0.1, 0.1)
        m.running_var.uniform_(0.5, 1.5)
model.train(False)

# Wrap in the PopTorch inference wrapper
inference_model = poptorch.inferenceModel(model)

# Execute on IPU.
out_tensor = inference_model(picture_of_a_cat_here)

# Get the top 5 classes.
top_five_classes = torch.topk(torch.softmax(out_tensor, 1), 5)
print(top_five_classes)

# Try the same on native PyTorch
native_out = model(picture_of_a_cat_here)
native_top_five_classes = torch.topk(torch.softmax(native_out, 1), 5)

# Models should be very close to native output.
assert any(top_five_classes[1][0] == native_top_five_classes[1][0])
