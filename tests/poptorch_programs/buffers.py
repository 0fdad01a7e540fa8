"""PopTorch user-guide style: buffers and plain tensor attributes changed in ``forward``.

``import poptorch`` became ``import xlgraph.poptorch as poptorch``. A tensor attribute that is
not a registered buffer is a constant of the compiled model: the change ``forward`` makes is
made once on the host, when the model is traced, and each call returns the traced value. A
registered buffer keeps its changes on the device.
"""
import torch

import xlgraph.poptorch as poptorch


class ConstantCounter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.i = torch.tensor([0.0])

    def forward(self):
        self.i += 1
        return self.i


class BufferCounter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("i", torch.tensor([0.0]))

    def forward(self):
        self.i += 1
        return self.i


constant_model = poptorch.inferenceModel(ConstantCounter())
constant_counts = [constant_model() for _ in range(3)]
print(constant_counts)  # [tensor([1.]), tensor([1.]), tensor([1.])]

buffer_model = poptorch.inferenceModel(BufferCounter())
buffer_counts = [buffer_model() for _ in range(3)]
print(buffer_counts)  # [tensor([1.]), tensor([2.]), tensor([3.])]
