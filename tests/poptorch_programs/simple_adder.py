"""PopTorch's examples, ``simple_adder.py``: the smallest inference model.

``import poptorch`` became ``import xlgraph.poptorch as poptorch``.
"""
import torch
import torch.nn as nn

import xlgraph.poptorch as poptorch


class SimpleAdder(nn.Module):
    def forward(self, x, y):
        return x + y


model = SimpleAdder()
inference_model = poptorch.inferenceModel(model)

t1 = torch.tensor([1.])
t2 = torch.tensor([2.])

assert inference_model(t1, t2) == 3.0
print("Success")
