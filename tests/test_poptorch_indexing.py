"""Advanced indexing in PopTorch models, as PopTorch's indexing tests write it: reads through
several index tensors (broadcast, negative, with slices and ``None`` between them), assignment
and accumulation through index tensors and boolean (or uint8) masks, each trained against
torch eager."""

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


def _train_both(fn, a=I0, b=I1, steps=2, eager_a=None):
    """Train ``fn`` on the device and in eager (where ``a`` is ``eager_a`` when given)."""
    eager_a = a if eager_a is None else eager_a
    torch.manual_seed(0)
    net = _Indexer(fn)
    ref = _Indexer(fn)
    ref.load_state_dict(net.state_dict())
    x = torch.randn(4, 5, 6)
    model = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.01))
    opt = torch.optim.SGD(ref.parameters(), lr=0.01)
    for _ in range(steps):
        got, loss = model(x, a, b)
        want, ref_loss = ref(x, eager_a, b)
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


# uint8 masks: torch reads a uint8 index tensor as a mask (non-zero selects; deprecated but
# working). torch 2.13 eager refuses some uint8 assignments ("masked_fill_ only supports boolean
# masks"), so the eager reference runs the same forward with ``mask.bool()``, which is what
# torch (and PopTorch) define the uint8 mask to mean.
def _u8_assign(t, mask, b):
    t = t.clone()
    t[mask] = torch.tensor(-1.0)
    return t


def _u8_assign_rows(t, mask, b):
    t = t.clone()
    t[mask] = t[(0,) * mask.dim()] * 2  # one selected element's values, broadcast
    return t


def _u8_scale(t, mask, b):
    t = t.clone()
    t[mask] *= 3.0
    return t


def _u8_accumulate(t, mask, b):
    return t.index_put((mask,), t[(1,) * mask.dim()], accumulate=True)


@pytest.mark.parametrize("rank", [1, 2, 3])
@pytest.mark.parametrize("fn", [_u8_assign, _u8_assign_rows, _u8_scale, _u8_accumulate],
                         ids=lambda f: f.__name__.lstrip("_"))
def test_uint8_masks_over_leading_dims_train_as_bool_masks(fn, rank):
    mask = torch.randint(0, 3, (4, 5, 6)[:rank], dtype=torch.uint8,
                         generator=torch.Generator().manual_seed(rank))  # 2 selects as 1 does
    assert mask.eq(2).any() and mask.eq(0).any()
    _train_both(fn, a=mask, eager_a=mask.bool())


def test_uint8_mask_inside_and_read_as_torch_reads_it():
    class Net(nn.Module):
        def forward(self, x, mask):
            x = x.clone()
            x[:, mask] = x[:, 0, 0:1]  # a rank-2 uint8 mask on dims 1 and 2
            return x

    x = torch.randn(4, 5, 6)
    mask = torch.randint(0, 2, (5, 6), dtype=torch.uint8)
    torch.testing.assert_close(poptorch.inferenceModel(Net())(x, mask), Net()(x, mask.bool()))

    class Read(nn.Module):
        def forward(self, x, mask):
            return x[mask]

    # reading through a uint8 mask is the data-dependent shape a bool mask's read is
    with pytest.raises(poptorch.Error, match="boolean-mask selection \\(x\\[mask\\]\\) is "
                                             "returned"):
        poptorch.inferenceModel(Read())(x, torch.ones(4, 5, dtype=torch.uint8))
