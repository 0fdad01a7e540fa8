"""The planned per-call path of ``PoplarExecutor`` (``xlgraph.poptorch.fastcall``): the same
results as the general path, outputs that belong to their call, and every call it does not
cover handed to the general path."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import xlgraph.poptorch as poptorch  # noqa: E402


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.fc2 = nn.Linear(12, 16), nn.Linear(16, 5)
        self.loss = nn.CrossEntropyLoss()

    def forward(self, x, labels):
        out = self.fc2(torch.relu(self.fc1(x)))
        return out, self.loss(out, labels), out.argmax(dim=1)


def _batches(count: int = 4, batch: int = 8) -> list[tuple[torch.Tensor, torch.Tensor]]:
    rng = np.random.default_rng(0)
    return [(torch.from_numpy(rng.normal(size=(batch, 12)).astype(np.float32)),
             torch.from_numpy(rng.integers(0, 5, batch))) for _ in range(count)]


def _wrapped(fast: bool, **options):
    model = Classifier()
    opts = poptorch.Options()
    if options.get("all"):
        opts.outputMode(poptorch.OutputMode.All)
    wrapped = poptorch.trainingModel(
        model, opts, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
    wrapped.compile(*_batches(1)[0])
    if not fast:
        wrapped._compiled.fast = None
    return wrapped, model


@pytest.mark.parametrize("output_mode_all", [False, True])
def test_the_planned_path_gives_the_general_paths_results(output_mode_all: bool) -> None:
    fast, fast_model = _wrapped(True, all=output_mode_all)
    slow, slow_model = _wrapped(False, all=output_mode_all)
    assert fast._compiled.fast is not None
    for x, y in _batches():
        got, want = fast(x, y), slow(x, y)
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            torch.testing.assert_close(g, w, rtol=0, atol=0)
    assert got[2].dtype == torch.int32  # argmax: int32 on the device and back, as PopTorch
    for p, q in zip(fast_model.parameters(), slow_model.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=0, atol=0)


def test_outputs_belong_to_their_call() -> None:
    wrapped, _ = _wrapped(True)
    (x0, y0), (x1, y1) = _batches(2)
    first = wrapped(x0, y0)
    kept = [t.clone() for t in first]
    second = wrapped(x1, y1)
    for a, b in zip(first, kept):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.equal(first[0], second[0])


def test_calls_outside_the_plan_take_the_general_path() -> None:
    wrapped, _ = _wrapped(True)
    x, y = _batches(1)[0]
    fast = wrapped._compiled.fast
    assert fast.feeds((x, y)) is not None
    assert fast.feeds((x,)) is None  # too few arguments
    assert fast.feeds((x.double(), y)) is None  # another dtype
    assert fast.feeds((x[:4], y[:4])) is None  # another shape
    assert fast.feeds((nn.Parameter(x), y)) is None  # a subclass (and needing gradients)
    wrapped(x, labels=y)  # keywords: bound by the general path
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        wrapped(x.clone().requires_grad_(), y)
    assert any("requires_grad" in str(w.message) for w in caught)
    with pytest.raises(poptorch.Error, match="Shape mismatch"):  # as in PopTorch
        wrapped(x[:4], y[:4])
    wrapped.destroy()
    out = wrapped(x[:4], y[:4])  # a new signature compiles after destroy()
    assert out[0].shape == (4, 5) and wrapped._compiled.fast is not None
    assert wrapped._compiled.fast.feeds((x[:4], y[:4])) is not None


def test_calls_that_select_over_steps_are_not_planned() -> None:
    model = Classifier()
    opts = poptorch.Options().deviceIterations(2)
    wrapped = poptorch.trainingModel(model, opts, torch.optim.SGD(model.parameters(), lr=0.05))
    x, y = _batches(1, batch=16)[0]
    out, loss, _ = wrapped(x, y)
    assert wrapped._compiled.fast is None and loss.shape == ()
