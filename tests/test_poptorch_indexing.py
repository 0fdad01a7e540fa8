"""Advanced indexing in PopTorch models, as PopTorch's indexing tests write it: reads through
several index tensors (broadcast, negative, with slices and ``None`` between them), assignment
and accumulation through index tensors and boolean masks, each trained against torch eager."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
poptorch = pytest.importorskip("xlgraph.poptorch")

I0 = torch.tensor([0, 2, -1])
I1 = torch.tensor([[1], [-3], [0]])  # broadcasts against I0 to (3, 3)

READS = {
    "one": lambda t, a, b: t[a],
    "two_adjacent": lambda t, a, b: t[a, b],
    "slice_first": lambda t, a, b: t[:, a, b],
    "split_by_slice": lambda t, a, b: t[a, :, b],
    "split_with_none": lambda t, a, b: t[a, None, :, b],
    "last_dim": lambda t, a, b: t[..., a],
    "three": lambda t, a, b: t[a, b, a],
    "scalar_index": lambda t, a, b: t[1, a],
    "index_of_index": lambda t, a, b: t[a][:, b],
}


class _Indexer(nn.Module):
    def __init__(self, fn, write=False):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 5, 6))
        self.fn, self.write = fn, write

    def forward(self, x, a, b):
        y = self.fn(x * self.w, a, b)
        return y, poptorch.identity_loss((y * y).sum(), reduction="sum")


def _train_both(fn, a=I0, b=I1, steps=2):
    torch.manual_seed(0)
    net = _Indexer(fn)
    ref = _Indexer(fn)
    ref.load_state_dict(net.state_dict())
    x = torch.randn(4, 5, 6)
    model = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.01))
    opt = torch.optim.SGD(ref.parameters(), lr=0.01)
    for _ in range(steps):
        got, loss = model(x, a, b)
        want, ref_loss = ref(x, a, b)
        torch.testing.assert_close(got, want.detach())
        torch.testing.assert_close(loss, ref_loss.detach(), rtol=1e-5, atol=1e-4)
        opt.zero_grad()
        ref_loss.backward()
        opt.step()
    torch.testing.assert_close(net.w.detach(), ref.w.detach())


@pytest.mark.parametrize("name", list(READS))
def test_index_reads_train_like_torch(name):
    _train_both(READS[name])


def _put(t, a, b):
    t = t.clone()
    t[a, b] = torch.tensor(3.0)
    return t


def _put_rows(t, a, b):
    t = t.clone()
    t[:, a] = t[:, 0:3] * 2  # values of x[:, a]'s shape (4, 3, 6)
    return t


def _put_split(t, a, b):
    t = t.clone()
    t[a, :, b] = t[0, 0, :1].clone()  # index dims (3, 3) first, values broadcast from (1,)
    return t


def _accumulate(t, a, b):
    repeated = torch.tensor([1, 1, -1, 3])  # duplicates add up
    return t.index_put((repeated,), t[0:4] * 0.5, accumulate=True)


def _accumulate_pair(t, a, b):
    return torch.ops.aten.index_put(t, [a, None, b.flatten()[:3]], t[0, :, 0:1].T.expand(3, 5),
                           accumulate=True)


def _mask_put(t, a, b):
    t = t.clone()
    t[t > 0.5] = 0.0
    return t


def _mask_put_inner(t, a, b):
    t = t.clone()
    mask = t[0] > 0  # a rank-2 mask on dims 1 and 2
    t[:, mask] = t[:, 0, 0:1]
    return t


def _mask_accumulate(t, a, b):
    mask = t[:, :, 0] < 0  # rank-2 mask on the leading dims, rows of 6 values
    return t.index_put((mask,), t[0, 0], accumulate=True)


def _mask_scale(t, a, b):
    t = t.clone()
    t[t < 0] *= 3.0
    return t


WRITES = {f.__name__.lstrip("_"): f for f in (_put, _put_rows, _put_split, _accumulate,
                                             _accumulate_pair, _mask_put, _mask_put_inner,
                                             _mask_accumulate, _mask_scale)}


@pytest.mark.parametrize("name", list(WRITES))
def test_index_put_forms_train_like_torch(name):
    _train_both(WRITES[name])


def test_inference_model_indexes_with_int32_and_int64_tensors():
    class Net(nn.Module):
        def forward(self, x, i, j):
            return x[i, j], x[:, j.to(torch.int32)]

    x = torch.randn(4, 6)
    i, j = torch.tensor([3, -4]), torch.tensor([5, 0])
    got = poptorch.inferenceModel(Net())(x, i, j)
    for g, w in zip(got, Net()(x, i, j), strict=True):
        torch.testing.assert_close(g, w)


def test_assigning_a_data_dependent_number_of_values_is_a_clear_error():
    class Net(nn.Module):
        def forward(self, x):
            x = x.clone()
            x[x > 0] = torch.arange(24.0).reshape(4, 6)[0, :2]
            return x

    with pytest.raises(Exception, match="number of selected elements depends on the data"):
        poptorch.inferenceModel(Net())(torch.randn(4, 6))
