"""PopTorch's examples, ``lstm.py``: an LSTM run one step at a time, its hidden state fed back.

``import poptorch`` became ``import xlgraph.poptorch as poptorch``.
"""
import torch
import torch.nn as nn

import xlgraph.poptorch as poptorch


class SimpleLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(3, 3)

    def forward(self, x, hidden):
        return self.lstm(x, hidden)


torch.manual_seed(0)
inputs = [torch.randn(1, 3) for _ in range(5)]
# Initialise the hidden state.
hidden = (torch.randn(1, 1, 3), torch.randn(1, 1, 3))
initial_hidden = hidden

model = SimpleLSTM()
ipu_lstm = poptorch.inferenceModel(model)
outputs = []
for i in inputs:
    # One element of the sequence at a time; the hidden state comes back each step.
    out, hidden = ipu_lstm(i.view(1, 1, -1), hidden)
    outputs.append(out)
print(outputs[-1], hidden)
