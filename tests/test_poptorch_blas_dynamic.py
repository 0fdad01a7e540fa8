"""BLAS forms with ``beta``/``alpha``, ``poptorch.dynamic_slice`` with steps,
``poptorch.dynamic_update`` and ``torch.bincount`` inside PopTorch models, as PopTorch's own
tests write them, against torch eager."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
poptorch = pytest.importorskip("xlgraph.poptorch")

BLAS = {
    "addmm": (lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0), (4, 5), (4, 3), (3, 5)),
    "addmm_beta0": (lambda c, a, b: torch.addmm(c, a, b, beta=0, alpha=3.0), (5,), (4, 3), (3, 5)),
    "addmv": (lambda c, a, b: torch.addmv(c, a, b, beta=-1.5, alpha=0.25), (4,), (4, 3), (3,)),
    "addmv_default": (torch.addmv, (1,), (4, 3), (3,)),
    "addbmm": (lambda c, a, b: torch.addbmm(c, a, b, beta=2.0, alpha=0.5), (4, 5), (2, 4, 3),
               (2, 3, 5)),
    "baddbmm": (lambda c, a, b: torch.baddbmm(c, a, b, beta=0.5, alpha=2.0), (2, 4, 5),
                (2, 4, 3), (2, 3, 5)),
    "method_addmm_": (lambda c, a, b: c.clone().addmm_(a, b, beta=0.5), (4, 5), (4, 3), (3, 5)),
}


class _Blas(nn.Module):
    def __init__(self, fn, c, a, b):
        super().__init__()
        self.fn = fn
        self.c, self.a = nn.Parameter(torch.randn(c)), nn.Parameter(torch.randn(a))
        self.b_shape = b

    def forward(self, b):
        out = self.fn(self.c, self.a, b)
        return out, poptorch.identity_loss((out * out).mean(), reduction="mean")


@pytest.mark.parametrize("name", list(BLAS))
def test_blas_forms_train_like_torch(name):
    fn, c, a, b = BLAS[name]
    torch.manual_seed(0)
    net = _Blas(fn, c, a, b)
    ref = _Blas(fn, c, a, b)
    ref.load_state_dict(net.state_dict())
    x = torch.randn(b)
    model = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    got, loss = model(x)
    want, ref_loss = ref(x)
    torch.testing.assert_close(got, want.detach(), rtol=1e-5, atol=1e-5)
    ref_loss.backward()
    with torch.no_grad():
        for p in ref.parameters():
            p -= 0.1 * p.grad
    torch.testing.assert_close(net.c.detach(), ref.c.detach())
    torch.testing.assert_close(net.a.detach(), ref.a.detach())


@pytest.mark.parametrize("size,step", [(4, 2), (6, 4), (6, 3), (3, 1), (4, 3)])
def test_dynamic_slice_with_a_step_trains_like_a_strided_slice(size, step):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(4, 12))

        def forward(self, x, start):
            y = poptorch.dynamic_slice(x * self.w, 1, start, size, step)
            return y, poptorch.identity_loss((y * y).sum(), reduction="sum")

    torch.manual_seed(0)
    net = Net()
    w = net.w.detach().clone().requires_grad_()
    x, start = torch.randn(4, 12), torch.tensor(1)
    model = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    got, _ = model(x, start)
    want = (x * w)[:, 1:1 + size:step]
    assert got.shape == (4, -(-size // step))
    torch.testing.assert_close(got, want.detach())
    (want * want).sum().backward()
    torch.testing.assert_close(net.w.detach(), (w - 0.1 * w.grad).detach())


def test_dynamic_update_writes_a_window_at_a_runtime_start():
    class Net(nn.Module):
        def forward(self, x, src, start):
            return poptorch.dynamic_update(x, src, 0, start, 2), \
                poptorch.dynamic_update(x, x[:, :3] * 2, -1, start + 1, 3)

    x = torch.randn(6, 5)
    src = torch.randn(2, 5)
    model = poptorch.inferenceModel(Net())
    for start in (0, 1, 4):
        first, second = model(x, src, torch.tensor(start))
        want = x.clone()
        want[start:start + 2] = src
        torch.testing.assert_close(first, want)
        at = min(start + 1, 2)  # the window is clamped to fit, as on the IPU
        want = x.clone()
        want[:, at:at + 3] = x[:, :3] * 2
        torch.testing.assert_close(second, want)


@pytest.mark.parametrize("call,match", [
    (lambda x: poptorch.dynamic_update(x, torch.zeros(3, 8), 0, torch.tensor(0), 2),
     r"src of shape \(3, 8\) must have the shape"),
    (lambda x: poptorch.dynamic_slice(x, 2, torch.tensor(0), 2, 1), "dim 2 is out of range"),
])
def test_dynamic_slice_and_update_check_their_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call(torch.randn(6, 8))


@pytest.mark.parametrize("call,match", [
    (lambda x: poptorch.dynamic_slice(x, 1, torch.tensor(0), 0, 1),
     r"^The start and end of a slice must be different\.$"),
    (lambda x: poptorch.dynamic_slice(x, 1, torch.tensor(0), -2, 1),
     r"^Taking a slice of a tensor with the end less than the start is not supported\.$"),
    (lambda x: poptorch.dynamic_slice(x, 1, torch.tensor(0), 2, 0),
     r"^Slicing step must be at least 1$"),
    (lambda x: poptorch.dynamic_slice(x, 1, torch.tensor(0), 7, 1),
     r"^The size of the slice \(7\) must be a factor of the slicing dimension \(8\)\.$"),
    (lambda x: poptorch.dynamic_slice(x, 1.0, torch.tensor(0), 2, 1),
     r"^Dimension must be an integer\.$"),
    (lambda x: poptorch.dynamic_slice(x, 1, torch.tensor(0), 2.0, 1), r"^Size must be an"),
    (lambda x: poptorch.dynamic_slice(x, 1, torch.tensor(0), 2, None), r"^Step must be an"),
    (lambda x: poptorch.dynamic_update(x, x[0], 0, torch.tensor(0), 1),
     r"^input and src tensors must have same dimensionality\. \(2\) vs \(1\)$"),
    (lambda x: poptorch.dynamic_update(x, x[:1].int(), 0, torch.tensor(0), 1),
     r"^input and src tensor must have same dtype\. \(torch\.float32 vs torch\.int32\)$"),
    (lambda x: poptorch.dynamic_update(x, x[:1], 0, torch.tensor(0), 0),
     r"^The start and end of a slice must be different\.$"),
])
def test_dynamic_slice_and_update_refuse_as_poptorch_when_compiled(call, match):
    class Net(nn.Module):
        def forward(self, x):
            return call(x)

    with pytest.raises(poptorch.Error, match=match):
        poptorch.inferenceModel(Net())(torch.randn(6, 8))


def test_bincount_counts_into_minlength_bins():
    class Net(nn.Module):
        def forward(self, idx, w):
            return torch.bincount(idx, minlength=6), idx.bincount(w, minlength=6)

    idx = torch.tensor([0, 1, 1, 3, 5, 5, 5, 2])
    w = torch.rand(8)
    got = poptorch.inferenceModel(Net())(idx, w)
    want = Net()(idx, w)
    torch.testing.assert_close(got[1], want[1])
    assert got[0].tolist() == want[0].tolist()


def test_bincount_without_minlength_is_a_clear_error():
    class Net(nn.Module):
        def forward(self, idx):
            return torch.bincount(idx)

    with pytest.raises(poptorch.Error, match="Bincount `minlength` must be specified"):
        poptorch.inferenceModel(Net())(torch.tensor([0, 1, 1]))
