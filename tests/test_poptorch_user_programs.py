"""PopTorch programs as users write them, in the families PopTorch's own tests exercise: nested
and keyword inputs, buffers, data-dependent Python, dtype promotion, random ops, boolean masks,
float16 (``opts.Precision.halfFloatCasting``, ``model.half()``), output modes, gradient
accumulation, ``identity_loss`` and the wrapper's methods. Each is checked against torch eager.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
poptorch = pytest.importorskip("xlgraph.poptorch")
from xlgraph.poptorch.capture import DataDependentError  # noqa: E402

_DEVICE = {torch.int64: torch.int32, torch.float64: torch.float32}  # PopTorch's result dtypes


def _close(got, want, **tol):
    for g, w in zip(got, want, strict=True):
        assert g.dtype == _DEVICE.get(w.dtype, w.dtype), (g.dtype, w.dtype)
        torch.testing.assert_close(g, w.detach().to(g.dtype), **tol)


def _sgd_step(model, loss_of, lr):
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    opt.zero_grad()
    loss_of(model).backward()
    opt.step()


class _Linear(nn.Module):
    def __init__(self, n=4):
        super().__init__()
        self.fc = nn.Linear(n, n)


# -- inputs --------------------------------------------------------------------------------------
def test_training_forward_takes_dict_star_args_and_keywords():
    class Net(_Linear):
        def __init__(self):
            super().__init__(3)
            self.loss = nn.MSELoss()

        def forward(self, batch, *extra, scale=1.0, **targets):
            y = self.fc(batch["x"]) * scale + extra[0][1]
            return y, self.loss(y, targets["t"])

    torch.manual_seed(0)
    net, ref = Net(), Net()
    ref.load_state_dict(net.state_dict())
    batch, extra, t = {"x": torch.randn(4, 3)}, [torch.randn(4, 3), torch.randn(4, 3)], \
        torch.randn(4, 3)
    model = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    _, loss = model(batch, extra, scale=2.0, t=t)
    torch.testing.assert_close(loss, ref(batch, extra, scale=2.0, t=t)[1].detach())
    _sgd_step(ref, lambda m: m(batch, extra, scale=2.0, t=t)[1], 0.1)
    torch.testing.assert_close(net.fc.weight.detach(), ref.fc.weight.detach())


# -- buffers -------------------------------------------------------------------------------------
def test_step_counter_buffer_counts_every_device_iteration():
    class Counting(_Linear):
        def __init__(self):
            super().__init__(2)
            self.register_buffer("steps", torch.zeros((), dtype=torch.int32))

        def forward(self, x):
            self.steps += 1
            y = self.fc(x) * self.steps
            return y, poptorch.identity_loss(y.sum(), reduction="mean")

    net = Counting()
    model = poptorch.trainingModel(net, poptorch.Options().deviceIterations(4))
    model(torch.randn(8, 2))
    model(torch.randn(8, 2))
    assert int(net.steps) == 8


# -- data-dependent Python and boolean masks -----------------------------------------------------
class _Outer(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x)


def test_boolean_mask_selection_is_a_clear_error():
    class Select(nn.Module):
        def forward(self, x):
            return x[x > 0]

    with pytest.raises(DataDependentError) as info:
        poptorch.inferenceModel(_Outer(Select()))(torch.randn(5))
    message = str(info.value)
    assert "model.inner" in message and "return x[x > 0]" in message
    assert "torch.where" in message and "poptorch.cond" in message


def test_reducing_a_boolean_mask_selection_is_a_clear_error():
    class Total(nn.Module):
        def forward(self, x):
            return x[x > 0].sum()

    with pytest.raises(DataDependentError, match=r"x\[x > 0\]\.sum\(\)"):
        poptorch.inferenceModel(Total())(torch.randn(5))


def test_boolean_mask_assignment_and_where_forms_match_torch():
    class Masked(nn.Module):
        def forward(self, x, w):
            y = x.clone()
            y[y > 0] = 0
            z = x.clone()
            z[x < 0] *= 2
            v = w.clone()
            v[x > 0.5] = torch.tensor([1.0, 2.0])
            u = w.clone()
            u[x > 0] += w[x > 0].exp() * 2
            return (y, z, v, u, torch.where(x > 0, x, torch.zeros_like(x)),
                    x.masked_fill(x < 0, 1.0), (x * (x > 0)).sum())

    model = Masked()
    x, w = torch.randn(6), torch.randn(6, 2)
    _close(poptorch.inferenceModel(model)(x, w), model(x, w))


def test_boolean_mask_assignment_trains_like_torch():
    class Leaky(_Linear):
        def forward(self, x):
            y = self.fc(x)
            y[y < 0] = 0.1 * y[y < 0]
            return y, poptorch.identity_loss(y.square().mean(), "sum")

    torch.manual_seed(1)
    net, ref = Leaky(), Leaky()
    ref.load_state_dict(net.state_dict())
    x = torch.randn(5, 4)
    model = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    model(x)
    _sgd_step(ref, lambda m: m(x)[1], 0.1)
    torch.testing.assert_close(net.fc.weight.detach(), ref.fc.weight.detach())


# -- dtypes --------------------------------------------------------------------------------------
def test_mixed_dtypes_tensor_type_repeat_and_comparisons_match_torch():
    class Mixed(nn.Module):
        def forward(self, a, b, h):
            return (a + b, a * 2.5, b / 2, b // 2, a > b, a.half() + h, b * h.float(),
                    a.type(torch.int32), a.type(torch.float16), a.type_as(b), a.long(),
                    torch.max(a, b.float()), a.repeat(2, 3), a == b, a != b, torch.eq(a, 1),
                    (a >= b).all(), (a < b).any())

    model = Mixed()
    a, b = torch.randn(4) * 3, torch.randint(-3, 4, (4,))
    h = torch.randn(4).half()
    _close(poptorch.inferenceModel(model)(a, b, h), model(a, b, h), atol=1e-2, rtol=1e-2)


class _HalfMix(nn.Module):
    def forward(self, a, h):
        s = a + h
        return s, torch.relu(s) * a, torch.matmul(a.view(2, 2), h.view(2, 2).float()), s.float()


def test_half_upcast_to_float_is_torchs_promotion():
    a, h = torch.randn(4), torch.randn(4).half()
    opts = poptorch.Options()
    opts.Precision.halfFloatCasting(poptorch.HalfFloatCastingBehavior.HalfUpcastToFloat)
    _close(poptorch.inferenceModel(_HalfMix(), opts)(a, h), _HalfMix()(a, h))
    _close(poptorch.inferenceModel(_HalfMix())(a, h), _HalfMix()(a, h))  # the default


def test_float_downcast_to_half_computes_mixed_ops_in_float16():
    """PopTorch's FloatDowncastToHalf: an op with float16 and float32 operands casts them all
    to float16, and what is computed from it stays float16; an explicit cast is kept."""
    a, h = torch.randn(4), torch.randn(4).half()
    opts = poptorch.Options()
    opts.Precision.halfFloatCasting(poptorch.HalfFloatCastingBehavior.FloatDowncastToHalf)
    s, r, m, f = poptorch.inferenceModel(_HalfMix(), opts)(a, h)
    # m: both operands float32 after h.float(); f: s.float() is a no-op in torch's float32
    # view of s, so nothing records it and s stays float16 (as in PopTorch's traced graphs)
    assert (s.dtype, r.dtype, m.dtype, f.dtype) == (torch.float16, torch.float16, torch.float32,
                                                    torch.float16)
    half = a.half() + h
    torch.testing.assert_close(s, half)
    torch.testing.assert_close(r, torch.relu(half) * a.half())
    torch.testing.assert_close(m, torch.matmul(a.view(2, 2), h.view(2, 2).float()))


def test_half_model_trains_in_float16():
    torch.manual_seed(0)

    class Half(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
            self.loss = nn.MSELoss()

        def forward(self, x, t):
            y = self.net(x)
            return y, self.loss(y, t)

    net = Half().half()
    model = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    x, t = torch.randn(8, 4).half(), torch.randn(8, 2).half()
    first = model(x, t)[1]
    for _ in range(20):
        out, loss = model(x, t)
    assert out.dtype == loss.dtype == net.net[0].weight.dtype == torch.float16
    assert loss < first


# -- random ops ----------------------------------------------------------------------------------
def test_random_ops_draw_in_an_inference_model():
    class Noisy(nn.Module):
        def forward(self, x):
            return (x + torch.rand(x.shape), torch.randn_like(x), torch.randint(0, 3, (4000,)),
                    torch.randint_like(x, 2, 5))

    model = poptorch.inferenceModel(Noisy())
    x = torch.zeros(4000)
    uniform, normal, ints, ints_like = model(x)
    again = model(x)[0]
    assert 0 <= uniform.min() and uniform.max() < 1 and abs(float(uniform.mean()) - 0.5) < 0.03
    assert abs(float(normal.std()) - 1) < 0.05 and not torch.equal(uniform, again)
    assert ints.dtype == torch.int32 and set(ints.tolist()) == {0, 1, 2}
    assert ints_like.dtype == torch.float32 and set(ints_like.tolist()) == {2.0, 3.0, 4.0}
    assert abs(float(ints.float().mean()) - 1) < 0.05


def test_dropout_is_identity_in_an_inference_model_in_train_mode():
    net = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).train()
    x = torch.randn(3, 4)
    torch.testing.assert_close(poptorch.inferenceModel(net)(x), net[0](x).detach())


def test_training_model_with_noise_and_dropout_in_forward():
    class Noisy(_Linear):
        def forward(self, x):
            y = nn.functional.dropout(self.fc(x + torch.randn_like(x) * 0.1), 0.3)
            return y, poptorch.identity_loss(y.pow(2).mean(), "mean")

    net = Noisy()
    before = net.fc.weight.detach().clone()
    model = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    a, b = model(torch.ones(3, 4))[0], model(torch.ones(3, 4))[0]
    assert not torch.equal(a, b) and not torch.equal(before, net.fc.weight.detach())
    assert bool((a == 0).float().mean() > 0.05)  # dropout zeroed some outputs


# -- output modes, accumulation, identity_loss ---------------------------------------------------
@pytest.mark.parametrize("mode,rows,losses", [("All", 12, (4,)), ("Final", 3, ()),
                                              ("Sum", 3, ())])
def test_training_output_modes_shape_outputs(mode, rows, losses):
    class Net(_Linear):
        def forward(self, x):
            y = self.fc(x)
            return y, poptorch.identity_loss(y.sum(), "sum")

    opts = poptorch.Options().deviceIterations(4).outputMode(getattr(poptorch.OutputMode, mode))
    out, loss = poptorch.trainingModel(Net(), opts)(torch.randn(12, 4))
    assert out.shape == (rows, 4) and loss.shape == losses


def test_gradient_accumulation_with_the_dataloader_matches_torch():
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(64, 3), torch.randint(0, 2, (64,)))
    opts = poptorch.Options().deviceIterations(2)
    opts.Training.gradientAccumulation(4)
    loader = poptorch.DataLoader(opts, data, batch_size=2, shuffle=True)
    assert len(loader) == 4 and loader.combinedBatchSize == 16

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 2)
            self.loss = nn.CrossEntropyLoss()

        def forward(self, x, y):
            out = self.fc(x)
            return out, self.loss(out, y)

    net, ref = Net(), Net()
    ref.load_state_dict(net.state_dict())
    model = poptorch.trainingModel(net, opts, torch.optim.SGD(net.parameters(), lr=0.1))
    for x, y in loader:
        model(x, y)
        for step in range(2):  # one optimiser step per 4 micro-batches of 2
            xs, ys = x[step * 8:(step + 1) * 8], y[step * 8:(step + 1) * 8]
            _sgd_step(ref, lambda m, xs=xs, ys=ys: sum(
                m(xs[i * 2:(i + 1) * 2], ys[i * 2:(i + 1) * 2])[1] for i in range(4)) / 4, 0.1)
    torch.testing.assert_close(net.fc.weight.detach(), ref.fc.weight.detach())


def test_identity_loss_none_returns_the_elements_and_backprops_ones():
    class Net(_Linear):
        def forward(self, x, t):
            y = self.fc(x)
            return y, poptorch.identity_loss((y - t).abs(), reduction="none")

    net, ref = Net(), Net()
    ref.load_state_dict(net.state_dict())
    x, t = torch.randn(2, 4), torch.randn(2, 4)
    model = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    _, loss = model(x, t)
    assert loss.shape == (2, 4)
    _sgd_step(ref, lambda m: (m.fc(x) - t).abs().sum(), 0.1)
    torch.testing.assert_close(net.fc.weight.detach(), ref.fc.weight.detach())
    with pytest.raises(AssertionError):
        poptorch.identity_loss(x, "max")


# -- the wrapper's methods -----------------------------------------------------------------------
def test_wrapper_methods_follow_poptorch():
    class Net(_Linear):
        def forward(self, x):
            y = self.fc(x)
            return y, poptorch.identity_loss(y.pow(2).sum(), "sum")

    net = Net()
    model = poptorch.trainingModel(net)
    assert not model.isCompiled()
    model.compile(torch.randn(2, 4))
    assert model.isCompiled() and model.isAttachedToDevice()
    model.detachFromDevice()
    model(torch.randn(2, 4))  # re-attaches
    assert model.isAttachedToDevice()
    with torch.no_grad():
        net.fc.weight.zero_()
    model.copyWeightsToDevice()
    model(torch.randn(2, 4))
    assert net.fc.weight.abs().sum() > 0  # trained from zero, read back
    assert isinstance(net, Net) and type(net).__name__ == "PoptorchNet"
    with pytest.raises(RuntimeError):
        poptorch.trainingModel(net)
    # a torch.optim optimiser may replace the default poptorch.optim.SGD with a new rate
    model.setOptimizer(torch.optim.SGD(net.parameters(), lr=0.5))
    model(torch.randn(2, 4))
    with pytest.raises(poptorch.Error):
        model.setOptimizer(torch.optim.Adam(net.parameters()))
    model.destroy()
    assert type(net) is Net
    again = poptorch.trainingModel(net)
    again(torch.randn(2, 4))
    assert "fc.weight" in again.state_dict()


# -- ops PopTorch programs reach for -------------------------------------------------------------
def test_diagonals_one_hot_and_value_checks_match_torch():
    class Diagonals(nn.Module):
        def forward(self, x, labels):
            return (torch.diag(x[:, :4]), torch.diagonal(x, 1), torch.diagonal(x, -2),
                    torch.diagonal(x.reshape(2, 2, 5), 0, 2, 0), torch.trace(x[:, :4]),
                    nn.functional.one_hot(labels, 6))

    model = Diagonals()
    x, labels = torch.randn(4, 5), torch.randint(0, 6, (4, 5))
    _close(poptorch.inferenceModel(model)(x, labels), model(x, labels))


def test_item_in_forward_is_a_clear_error():
    class Item(nn.Module):
        def forward(self, x):
            return x + x.sum().item()

    with pytest.raises(DataDependentError, match=r"item\(\).*return x \+ x.sum\(\).item\(\)"):
        poptorch.inferenceModel(Item())(torch.randn(3))


@pytest.mark.parametrize("fn", [lambda x: torch.nonzero(x > 0), lambda x: torch.unique(x),
                                lambda x: torch.masked_select(x, x > 0)])
def test_data_dependent_shapes_are_clear_errors(fn):
    class Dynamic(nn.Module):
        def forward(self, x):
            return fn(x)

    with pytest.raises(DataDependentError, match="depends on the data"):
        poptorch.inferenceModel(Dynamic())(torch.randn(6))


def test_poptorch_error_types():
    """A batch that does not split into micro-batches is PopTorch's AssertionError (and a
    poptorch.Error); a model without a loss is a poptorch.Error."""
    model = poptorch.inferenceModel(nn.Linear(2, 2), poptorch.Options().deviceIterations(3))
    with pytest.raises(AssertionError, match="Invalid batch dimension"):
        model(torch.randn(4, 2))
    class NoLoss(_Linear):
        def forward(self, x):
            return self.fc(x)

    with pytest.raises(poptorch.Error, match="Couldn't find a loss"):
        poptorch.trainingModel(NoLoss())(torch.randn(2, 4))


def test_plain_python_outputs_come_back_in_place():
    class Mixed(_Linear):
        def forward(self, x, labels=None):
            y = self.fc(x)
            loss = None if labels is None else nn.functional.mse_loss(y, labels)
            return {"out": y, "loss": loss, "rows": x.shape[0]}

    net = Mixed()
    x = torch.randn(3, 4)
    got = poptorch.inferenceModel(net)(x)
    assert got["loss"] is None and got["rows"] == 3
    torch.testing.assert_close(got["out"], net(x)["out"].detach())
    trained = poptorch.trainingModel(net)(x, torch.randn(3, 4))
    assert trained["loss"].shape == () and trained["rows"] == 3


def test_inputs_requiring_grad_are_detached_with_a_warning():
    net = nn.Linear(3, 2)
    x = torch.randn(2, 3, requires_grad=True)
    with pytest.warns(UserWarning, match="requires_grad=True"):
        out = poptorch.inferenceModel(net)(x)
    assert not out.requires_grad and x.grad is None
    torch.testing.assert_close(out, net(x).detach())
