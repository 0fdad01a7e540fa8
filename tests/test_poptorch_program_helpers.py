"""PopTorch's helpers and small ops as PopTorch programs use them: ``poptorch._impl``, the
compile hooks, ``for_loop``/``cond`` (inputs by value, inference only), ``addmv`` with zero
scales, ``erfc`` and a few option checks; values against torch eager."""

from __future__ import annotations

import copy
import pickle

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import xlgraph.poptorch as poptorch  # noqa: E402
from xlgraph.poptorch import _impl  # noqa: E402


def test_forward_choosing_its_device_by_dispatch_tracing_runs_on_the_host_device():
    class Net(nn.Module):
        def forward(self, x):
            dev = "ipu" if poptorch.isRunningOnIpu() and \
                poptorch._impl.isDispatchTracing() else None
            return torch.zeros((2, 3), dtype=x.dtype, device=dev) + x

    x = torch.randn(2, 3)
    torch.testing.assert_close(poptorch.inferenceModel(Net())(x), x)
    assert poptorch._impl.isDispatchTracing() is False


def test_impl_helpers():
    err = poptorch._impl.createPoptorchError("bad thing")
    assert isinstance(err, poptorch.Error) and err.message == "bad thing"
    assert not poptorch.isRunningOnIpu()
    _impl.setIpuContext(True)
    try:
        assert poptorch.isRunningOnIpu()
    finally:
        _impl.setIpuContext(False)
    net = nn.Linear(2, 2)
    model = poptorch.trainingModel(net)
    assert _impl.isWrapped(net) and not _impl.isWrapped(nn.Linear(2, 2))
    assert _impl.unwrapIfWrapped(net) is net and type(net) is nn.Linear
    assert model.model is net


def test_compile_hooks_run_in_order_with_no_arguments_and_can_be_removed():
    calls = []
    pre = poptorch.registerPreCompileHook(lambda: calls.append("pre1"))
    pre2 = poptorch.registerPreCompileHook(lambda: calls.append("pre2"))
    post = poptorch.registerPostCompileHook(lambda: calls.append("post"))
    try:
        poptorch.inferenceModel(nn.Linear(2, 2))(torch.ones(1, 2))
        assert calls == ["pre1", "pre2", "post"]
        pre.remove()
        calls.clear()
        poptorch.inferenceModel(nn.Linear(2, 2))(torch.ones(1, 2))
        assert calls == ["pre2", "post"]
    finally:
        pre2.remove()
        post.remove()
    with pytest.raises(RuntimeError, match="^Pre-compile hook must be callable$"):
        poptorch.registerPreCompileHook(3)
    with pytest.raises(RuntimeError, match="^Post-compile hook must be callable$"):
        poptorch.registerPostCompileHook(None)


def test_for_loop_takes_its_inputs_by_value():
    class Net(nn.Module):
        def forward(self, x):
            x += 1

            def body(y):
                y += 1
                return y
            z = poptorch.for_loop(3, body, [x])[0]
            x += 1
            return z

    x = torch.ones(1, 5, dtype=torch.int32)
    out = poptorch.inferenceModel(Net())(x)
    assert out.tolist() == [[5] * 5] and x.tolist() == [[3] * 5]


@pytest.mark.parametrize("inputs,match", [
    ((torch.ones(2),), r"\(Object is not list\)$"),
    ([torch.ones(2), 3.0], r"\(Object contained in list at index 1 is not torch.tensor\)$"),
])
def test_for_loop_inputs_must_be_a_list_of_tensors(inputs, match):
    with pytest.raises(ValueError, match=r"^poptorch.for_loop expects input tensors \(inputs\) "
                                         r"to be a list of tensors\. " + match):
        poptorch.for_loop(2, lambda *t: t, inputs)


@pytest.mark.parametrize("which", ["for_loop", "cond"])
def test_for_loop_and_cond_are_inference_only(which):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)

        def forward(self, x):
            y = self.fc(x)
            if which == "for_loop":
                y = poptorch.for_loop(2, lambda t: t * 2, [y])[0]
            else:
                y = poptorch.cond(torch.tensor(True), lambda t: t * 2, [y],
                                  lambda t: t, [y])[0]
            return poptorch.identity_loss(y.sum(), reduction="sum")

    with pytest.raises(poptorch.Error, match=rf"^poptorch\.{which}\(\) is only supported in "
                                             rf"inference\.$"):
        poptorch.trainingModel(Net())(torch.ones(1, 2))


@pytest.mark.parametrize("alpha,beta", [(0.0, 2.0), (0.0, 0.0), (1.5, 0.0)])
def test_addmv_skips_the_terms_scaled_by_zero(alpha, beta):
    class Net(nn.Module):
        def forward(self, c, m, v):
            return torch.addmv(c, m, v, alpha=alpha, beta=beta)

    c, m, v = torch.randn(3), torch.randn(3, 4), torch.randn(4)
    c[1], m[0, 0] = float("nan"), float("inf")
    got = poptorch.inferenceModel(Net())(c, m, v)
    torch.testing.assert_close(got, torch.addmv(c, m, v, alpha=alpha, beta=beta),
                               equal_nan=True)


def test_erfc_runs_as_torch():
    class Net(nn.Module):
        def forward(self, x):
            return torch.erfc(x)

    x = torch.linspace(-3, 3, 13)
    torch.testing.assert_close(poptorch.inferenceModel(Net())(x), torch.erfc(x), atol=1e-6,
                               rtol=1e-5)


@pytest.mark.parametrize("tiles", [0, 30, 33, 194])
def test_num_io_tiles_must_be_even_between_32_and_192(tiles):
    with pytest.raises(AssertionError, match=r"^numIOTiles must be an even number between 32 "
                                             r"and 192\."):
        poptorch.Options().TensorLocations.numIOTiles(tiles)


def test_compilation_time_needs_a_compiled_model_with_the_progress_bar():
    model = poptorch.inferenceModel(nn.Linear(2, 2))
    with pytest.raises(poptorch.Error, match=r"^Please compile the model before obtaining "
                                             r"compilation time\.$"):
        model.compilationTime()
    opts = poptorch.Options().showCompilationProgressBar(False)
    quiet = poptorch.inferenceModel(nn.Linear(2, 2), opts)
    quiet(torch.ones(1, 2))
    with pytest.raises(poptorch.Error, match=r"^Please set showCompilationProgressBar option "
                                             r"to obtain compilation time\.$"):
        quiet.compilationTime()


@pytest.mark.parametrize("scale,shape", [(5.00001, (1, 2, 3, 4)), (5.12498, (1, 1, 3, 5)),
                                         (0.435714, (1, 2, 14, 14))])
def test_nearest_upsampling_uses_the_given_fractional_scale(scale, shape):
    up = nn.Upsample(scale_factor=scale)
    x = torch.randn(shape)
    got = poptorch.inferenceModel(up)(x)
    assert got.shape == up(x).shape and torch.equal(got, up(x))


@pytest.mark.parametrize("mode,shape,op", [("linear", (1, 2, 5), "upsample_linear1d"),
                                           ("trilinear", (1, 1, 2, 3, 4), "upsample_trilinear3d")])
def test_linear_and_trilinear_upsampling_are_refused(mode, shape, op):
    model = poptorch.inferenceModel(nn.Upsample(scale_factor=2, mode=mode))
    with pytest.raises(poptorch.Error, match=rf"^Unsupported upsample mode aten::{op}: currently "
                                             r"only 'nearest' is supported$"):
        model(torch.randn(shape))


def test_unfold_trains_like_torch():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(11, 4))

        def forward(self, x):
            y = (x * self.w).unfold(1, 5, 2)
            return y, poptorch.identity_loss((y * y).sum(), reduction="sum")

    torch.manual_seed(0)
    net = Net()
    w = net.w.detach().clone().requires_grad_()
    x = torch.randn(3, 11, 4)
    got, _ = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.01))(x)
    want = (x * w).unfold(1, 5, 2)
    assert got.shape == (3, 4, 4, 5)
    torch.testing.assert_close(got, want.detach())
    (want * want).sum().backward()
    torch.testing.assert_close(net.w.detach(), (w - 0.01 * w.grad).detach())


def test_default_options_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("POPTORCH_DEFAULT_OPTIONS", '{"deviceIterations": 2, "logDir": "run_logs", '
                       '"connectionType": "ConnectionType.OnDemand", '
                       '"Precision.enableFloatingPointExceptions": true, '
                       '"_Popart.set": ["saveInitializersToFile", "w.onnx"]}')
    from_env = poptorch.Options()
    monkeypatch.delenv("POPTORCH_DEFAULT_OPTIONS")
    by_calls = poptorch.Options().deviceIterations(2).logDir("run_logs").connectionType(
        poptorch.ConnectionType.OnDemand)
    by_calls.Precision.enableFloatingPointExceptions(True)
    by_calls._Popart.set("saveInitializersToFile", "w.onnx")
    assert from_env.connection_type is poptorch.ConnectionType.OnDemand
    assert str(from_env) == str(by_calls) and repr(from_env) == repr(by_calls)
    assert from_env.toDict() == by_calls.toDict()


class Block(nn.Module):
    def forward(self, x):
        return x * 2


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = poptorch.BeginBlock(Block(), ipu_id=1)
        self.l2 = nn.Linear(2, 3)

    def forward(self, x):
        return self.l2(self.l1(x))


def test_module_repr_shows_begin_blocks_which_copies_keep():
    model = Model()
    text = poptorch.module_repr(model)
    assert text == ("Model(\n  (l1): BeginBlock(user_id=None, ipu_id=1) Block()\n"
                    "  (l2): Linear(in_features=2, out_features=3, bias=True)\n)")
    for clone in (copy.copy(model), copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert poptorch.module_repr(clone) == text
    assert poptorch.module_repr(nn.Linear(2, 3)) == repr(nn.Linear(2, 3))
    with pytest.raises(poptorch.Error, match=r"^module has already been assigned to a block\.$"):
        poptorch.BeginBlock(model.l1, ipu_id=0)
    x = torch.randn(4, 2)
    torch.testing.assert_close(poptorch.inferenceModel(model)(x), model(x))


def test_one_hot_and_bincount_need_their_sizes_as_poptorch_words_it():
    class OneHot(nn.Module):
        def forward(self, x):
            return nn.functional.one_hot(x)

    class Count(nn.Module):
        def forward(self, x):
            return torch.bincount(x)

    x = torch.tensor([0, 2, 1])
    with pytest.raises(poptorch.Error, match=r"^OneHot num classes must be specified and must "
                                             r"be constant\.$"):
        poptorch.inferenceModel(OneHot())(x)
    with pytest.raises(poptorch.Error, match=r"^Bincount `minlength` must be specified and must "
                                             r"be a constant\. On the IPU MK2 platform the "
                                             r"minimum length is also the maximum length$"):
        poptorch.inferenceModel(Count())(x)

    class Sized(nn.Module):
        def forward(self, x):
            return nn.functional.one_hot(x, 4)

    assert torch.equal(poptorch.inferenceModel(Sized())(x), nn.functional.one_hot(x, 4).int())


def test_two_independent_losses_are_refused_in_poptorch_words():
    class TwoLosses(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)

        def forward(self, x):
            y = self.fc(x)
            return poptorch.identity_loss(y.sum(), reduction="sum"), \
                poptorch.identity_loss(y.mean(), reduction="mean")

    with pytest.raises(poptorch.Error, match=r"^Multiple independent losses found in graph\. "
                                             r"Graph must have one final loss\. Wrap final graph "
                                             r"loss in poptorch\.identity_loss\.$"):
        poptorch.trainingModel(TwoLosses())(torch.ones(1, 2))
