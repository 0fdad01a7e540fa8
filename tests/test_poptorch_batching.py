"""``poptorch.DataLoader``'s combined batches as PopTorch forms them: ``batch_size`` x device
iterations x replicas x gradient accumulation items per batch (one batch per call), a user's
``batch_sampler`` combined the same way, ``drop_last`` deciding the short last batch, in every
``DataLoaderMode``, with and without workers; then fed to a model."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
poptorch = pytest.importorskip("xlgraph.poptorch")

MODES = [poptorch.DataLoaderMode.Sync, poptorch.DataLoaderMode.Async,
         poptorch.DataLoaderMode.AsyncRebatched]


def _dataset(n: int = 100) -> torch.utils.data.TensorDataset:
    return torch.utils.data.TensorDataset(torch.arange(n, dtype=torch.float32).reshape(n, 1))


def _options(iterations=1, replicas=1, accumulation=1) -> poptorch.Options:
    opts = poptorch.Options().deviceIterations(iterations).replicationFactor(replicas)
    opts.Training.gradientAccumulation(accumulation)
    return opts


def _rows(loader) -> list[list[float]]:
    return [batch[0].flatten().tolist() for batch in loader]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("workers", [0, 1])
def test_batch_sampler_batches_combine_per_call(mode, workers):
    """100 items in sampler batches of 3 (34 batches, the last short); 5 device iterations
    make 7 calls' worth with drop_last=False, 6 with PopTorch's default drop_last=True."""
    sampler = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(range(100)), 3,
                                            drop_last=False)
    kept = poptorch.DataLoader(_options(5), _dataset(), batch_sampler=sampler, mode=mode,
                               num_workers=workers)
    assert len(kept) == 6
    rows = _rows(kept)
    assert len(rows) == 6 and all(len(r) == 15 for r in rows)
    assert rows[1] == [float(i) for i in range(15, 30)]
    with pytest.warns(UserWarning, match="drop_last=False"):
        short = poptorch.DataLoader(_options(5), _dataset(), batch_sampler=sampler,
                                    drop_last=False, mode=mode, num_workers=workers)
    assert len(short) == 7
    rows = _rows(short)
    assert [len(r) for r in rows] == [15] * 6 + [10]
    assert rows[-1] == [float(i) for i in range(90, 100)]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("iterations,replicas,accumulation", [(2, 1, 1), (2, 2, 1), (1, 2, 3),
                                                              (3, 2, 2)])
def test_combined_batch_size_and_count(mode, iterations, replicas, accumulation):
    opts = _options(iterations, replicas, accumulation)
    loader = poptorch.DataLoader(opts, _dataset(), batch_size=2, mode=mode)
    combined = 2 * iterations * replicas * accumulation
    assert loader.combinedBatchSize == combined
    assert len(loader) == 100 // combined
    rows = _rows(loader)
    assert len(rows) == 100 // combined
    assert [x for r in rows for x in r] == [float(i) for i in range(combined * len(rows))]


def test_a_combined_batch_sampler_feeds_a_training_model():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(1))

        def forward(self, x):
            out = x * self.w
            return out, poptorch.identity_loss((out * out).mean(), reduction="mean")

    opts = _options(iterations=2, accumulation=2)
    sampler = torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(range(40)), 4,
                                            drop_last=True)
    loader = poptorch.DataLoader(opts, _dataset(40), batch_sampler=sampler)
    net = Net()
    model = poptorch.trainingModel(net, opts, torch.optim.SGD(net.parameters(), lr=0.0))
    assert len(loader) == 2
    for (x,) in loader:
        out, loss = model(x)
        assert out.shape == (4, 1) and loss.shape == ()  # the last micro-batch's (Final)
