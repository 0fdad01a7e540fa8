"""PopTorch's integer rule, as a user meets it: 64-bit integers (and floats) are computed in
32 bits on the device and come back so. ``argmax``, counts of booleans, int64 inputs returned
and int64 buffers read in ``forward`` give int32 results; float64 gives float32 (PopTorch's
documented output dtypes). Values are torch's."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
poptorch = pytest.importorskip("xlgraph.poptorch")


class Counts(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("offset", torch.tensor([1, 2, 3], dtype=torch.int64))

    def forward(self, x, labels, d):
        return (x.argmax(1), (x > 0).sum(), (x > 0).sum(1), labels, labels * 2 + self.offset,
                torch.topk(x, 2).indices, d * 2, x.sort(1).indices, labels.cumsum(0))


def test_int64_results_come_back_as_int32_with_torchs_values():
    torch.manual_seed(0)
    x, labels = torch.randn(4, 3), torch.tensor([[5, -7, 2**30]] * 4)
    d = torch.randn(4, dtype=torch.float64)
    got = poptorch.inferenceModel(Counts())(x, labels, d)
    want = Counts()(x, labels, d)
    for g, w in zip(got, want, strict=True):
        expected = {torch.int64: torch.int32, torch.float64: torch.float32}[w.dtype] \
            if w.dtype in (torch.int64, torch.float64) else w.dtype
        assert g.dtype == expected, (g.dtype, w.dtype)
        torch.testing.assert_close(g, w.to(expected))


def test_training_returns_int32_predictions_and_keeps_the_hosts_int64_buffers():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 4)
            self.register_buffer("seen", torch.zeros((), dtype=torch.int64))

        def forward(self, x, y):
            self.seen += x.shape[0]
            out = self.fc(x)
            return out.argmax(1), nn.functional.cross_entropy(out, y)

    net = Net()
    model = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    pred, loss = model(torch.randn(5, 3), torch.tensor([0, 1, 2, 3, 0]))
    assert pred.dtype == torch.int32 and pred.shape == (5,) and loss.dtype == torch.float32
    model(torch.randn(5, 3), torch.tensor([0, 1, 2, 3, 0]))
    assert net.seen.dtype == torch.int64 and int(net.seen) == 10
