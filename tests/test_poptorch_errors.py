"""The errors and warnings PopTorch gives, met as a PopTorch user meets them: option
combinations it refuses, calls that do not fit ``forward`` or the compiled inputs, inputs
changed in place, and 64-bit tensors run in 32 bits. Values are compared with torch eager."""

from __future__ import annotations

import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import xlgraph.poptorch as poptorch  # noqa: E402


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x, labels=None):
        out = self.fc(x)
        if labels is None:
            return out
        return out, nn.functional.cross_entropy(out, labels)


class TwoIpus(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = poptorch.BeginBlock(nn.Linear(4, 4), ipu_id=0)
        self.b = poptorch.BeginBlock(nn.Linear(4, 3), ipu_id=1)

    def forward(self, x, labels):
        out = self.b(self.a(x))
        return out, nn.functional.cross_entropy(out, labels)


def _batch(n):
    torch.manual_seed(1)
    return torch.randn(n, 4), torch.randint(0, 3, (n,))


# -- option combinations ---------------------------------------------------------------------
def test_inference_model_refuses_gradient_accumulation():
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(4)
    with pytest.raises(poptorch.Error, match=r"gradientAccumulation to 1 .*inferenceModel.*4"):
        poptorch.inferenceModel(Net(), opts)


@pytest.mark.parametrize("iterations, period", [(4, 3), (2, 4)])
def test_every_n_period_must_divide_device_iterations(iterations, period):
    opts = poptorch.Options().deviceIterations(iterations)
    opts.outputMode(poptorch.OutputMode.EveryN, period)
    model = poptorch.inferenceModel(Net(), opts)
    with pytest.raises(poptorch.Error, match=rf"return period \({period}\).*deviceIterations "
                                             rf"\({iterations}\)"):
        model(_batch(2 * iterations)[0])


def test_output_return_period_is_needed_by_every_n_and_ignored_by_the_rest():
    with pytest.raises(AssertionError, match="output_return_period"):
        poptorch.Options().outputMode(poptorch.OutputMode.EveryN)
    opts = poptorch.Options().deviceIterations(4)
    opts.outputMode(poptorch.OutputMode.Final, output_return_period=3)
    assert opts.output_return_period == 3
    x = _batch(8)[0]
    net = Net()
    out = poptorch.inferenceModel(net, opts)(x)
    torch.testing.assert_close(out, net(x[6:]).detach())


def test_pipelined_training_needs_accumulation_to_fill_the_pipeline():
    x, y = _batch(6)
    with pytest.raises(poptorch.Error, match=r"gradientAccumulation must be greater than or "
                                             r"equal to the number of pipeline stages \(3\)"):
        poptorch.trainingModel(TwoIpus())(x[:2], y[:2])
    opts = poptorch.Options().setExecutionStrategy(poptorch.PipelinedExecution(
        poptorch.AutoStage.AutoIncrement))
    opts.Training.gradientAccumulation(3)
    poptorch.trainingModel(TwoIpus(), opts)(x, y)  # three micro-batches fill it
    sharded = poptorch.Options().setExecutionStrategy(poptorch.ShardedExecution())
    poptorch.trainingModel(TwoIpus(), sharded)(x[:2], y[:2])  # no pipeline to fill


def test_pipelined_inference_needs_device_iterations_to_fill_the_pipeline():
    x, y = _batch(4)
    model = poptorch.inferenceModel(TwoIpus())
    with pytest.raises(poptorch.Error, match=r"deviceIterations must be greater than or equal "
                                             r"to the number of pipeline stages \(2\)"):
        model(x, y)
    net = TwoIpus()
    out, _ = poptorch.inferenceModel(net, poptorch.Options().deviceIterations(2))(x, y)
    torch.testing.assert_close(out, net(x, y)[0].detach())


def test_input_group_size_must_divide_the_replicas():
    opts = poptorch.Options().replicationFactor(4)
    opts.inputReplicaGrouping(3, poptorch.CommGroupType.Consecutive)
    with pytest.raises(poptorch.Error, match=r"input group size \(3\).*replicationFactor \(4\)"):
        poptorch.inferenceModel(Net(), opts)(_batch(4)[0])


# -- calls -----------------------------------------------------------------------------------
@pytest.mark.parametrize("args, kwargs, words", [
    ((1, 2, 3), {}, r"Too many arguments provided to Net.forward"),
    ((1,), {"label": 2}, r"label is not a valid parameter of Net.forward"),
    ((1,), {"x": 2}, r"Parameter x of Net.forward was passed more than once"),
    ((), {"labels": 2}, r"Mandatory parameter x missing"),
])
def test_calls_must_fit_forward(args, kwargs, words):
    model = poptorch.inferenceModel(Net())
    x, _ = _batch(2)
    args = tuple(x if a == 1 else a for a in args)
    with pytest.raises(AssertionError, match=words + r".*test_poptorch_errors.py"):
        model(*args, **kwargs)


def test_inputs_must_match_the_compiled_ones_until_destroy():
    net = Net()
    model = poptorch.inferenceModel(net)
    x, y = _batch(4)
    model(x)
    with pytest.raises(poptorch.Error, match=r"Shape mismatch for x: expected torch.Size\(\[4, "
                                             r"4\]\) but got torch.Size\(\[2, 4\]\)\."):
        model(x[:2])
    with pytest.raises(poptorch.Error, match=r"Data type mismatch for x: expected torch.float32 "
                                             r"but got torch.float16\."):
        model(x.half())
    with pytest.raises(poptorch.Error, match=r"Type mismatch for labels: expected <class "
                                             r"'NoneType'> but got <class 'torch.Tensor'>\."):
        model(x, y)
    model.destroy()  # the next call compiles for its inputs
    out, loss = model(x, y)
    want_out, want_loss = net(x, y)
    torch.testing.assert_close(out, want_out.detach())
    torch.testing.assert_close(loss, want_loss.detach())


def test_nested_inputs_and_plain_values_must_match_too():
    class Pairs(nn.Module):
        def forward(self, xs, scale):
            return sum(x for x in xs) * scale

    model = poptorch.inferenceModel(Pairs())
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    torch.testing.assert_close(model((a, b), 2.0), (a + b) * 2.0)
    with pytest.raises(poptorch.Error, match=r"Length mismatch for xs: expected 2 elements but "
                                             r"got 3\."):
        model((a, b, a), 2.0)
    with pytest.raises(poptorch.Error, match=r"Shape mismatch for xs\[1\]"):
        model((a, b[:1]), 2.0)
    with pytest.raises(poptorch.Error, match=r"Value mismatch for scale: expected 2.0 but got "
                                             r"3.0"):
        model((a, b), 3.0)


# -- in-place changes of inputs --------------------------------------------------------------
class Accumulate(nn.Module):
    def forward(self, total, x):
        total += x
        total.mul_(2)
        return total - 1


@pytest.mark.parametrize("iterations", [1, 4])
def test_inputs_changed_in_place_come_back_to_the_callers_tensor(iterations):
    model = poptorch.inferenceModel(Accumulate(),
                                    poptorch.Options().deviceIterations(iterations))
    total = torch.randn(2 * iterations, 3)
    mine = total.clone()
    for _ in range(2):
        x = torch.randn(2 * iterations, 3)
        want = Accumulate()(mine, x)
        got = model(total, x)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(total, mine)  # changed as torch changes it


def test_training_writes_changed_inputs_back_too():
    class Scaled(Net):
        def forward(self, x, labels):
            x.mul_(0.5)
            return super().forward(x, labels)

    x, y = _batch(4)
    net = Scaled()
    model = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), 0.0))
    mine = x.clone()
    model(x, y)
    torch.testing.assert_close(x, mine * 0.5)


# -- 64-bit tensors --------------------------------------------------------------------------
def test_64_bit_inputs_and_buffers_warn_once_per_compilation():
    class Offsets(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("offset", torch.tensor([1, 2], dtype=torch.int64))

        def forward(self, i, d):
            return i + self.offset, d * 2

    model = poptorch.inferenceModel(Offsets())
    i, d = torch.tensor([3, 4]), torch.tensor([0.5, 1.5], dtype=torch.float64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got_i, got_d = model(i, d)
        model(i, d)  # compiled already: no warning
    messages = sorted(str(w.message) for w in caught)
    assert len(messages) == 2, messages
    assert messages[0].startswith("torch.float64 is not supported natively on IPU, loss of "
                                  "range/precision may occur: input 'd' run as torch.float32")
    assert messages[1].startswith("torch.int64 is not supported natively on IPU, loss of "
                                  "range/precision may occur: input 'i' and 1 more run as "
                                  "torch.int32")
    assert all(w.category is UserWarning and w.filename == __file__ for w in caught)
    torch.testing.assert_close(got_i, (i + torch.tensor([1, 2])).int())
    torch.testing.assert_close(got_d, (d * 2).float())


# -- output modes ----------------------------------------------------------------------------
_MODES = [(poptorch.OutputMode.All, None), (poptorch.OutputMode.Final, None),
          (poptorch.OutputMode.Sum, None), (poptorch.OutputMode.EveryN, 2),
          (poptorch.OutputMode.Default, None)]


def _expected(eager, steps, replicas, mode, period):
    """What PopTorch returns of per-micro-batch results ``eager`` ([steps, replicas, ...]):
    k results (all, every n-th step, or one per replica), a scalar per micro-batch becoming
    a vector when k > 1."""
    if mode == poptorch.OutputMode.Final:
        eager = eager[-1:]
    elif mode == poptorch.OutputMode.Sum:
        eager = eager.sum(0, keepdim=True)
    elif mode == poptorch.OutputMode.EveryN:
        eager = eager[period - 1::period]
    k = eager.shape[0] * eager.shape[1]
    if k == 1:
        return eager[0, 0]
    return eager.reshape((k,) + eager.shape[2:]) if eager.dim() == 2 else \
        eager.reshape((k * eager.shape[2],) + eager.shape[3:])


def _valid(combos):
    """Each (mode, period, *sizes) whose EveryN period divides the device iterations (the
    others are refused, tested above)."""
    return [(*m, *c) for m in _MODES for c in combos if not m[1] or c[0] % m[1] == 0]


@pytest.mark.parametrize("mode, period, iterations, replicas, accumulation", _valid(
    [(1, 1, 1), (2, 2, 3)]))
def test_training_outputs_by_mode_match_torch(mode, period, iterations, replicas, accumulation):
    torch.manual_seed(0)
    net = Net()
    opts = poptorch.Options().deviceIterations(iterations).replicationFactor(replicas)
    opts.outputMode(mode, period)
    opts.Training.gradientAccumulation(accumulation)
    steps, micro = iterations * accumulation, 2
    x, y = _batch(steps * replicas * micro)
    # lr 0: every micro-batch sees the initial weights, as torch eager does
    trained = copy.deepcopy(net)
    model = poptorch.trainingModel(trained, opts, torch.optim.SGD(trained.parameters(), lr=0.0))
    preds, losses = model(x, y)
    grid = (steps, replicas, micro)
    want_preds = net(x).detach().reshape(grid + (3,))
    want_losses = torch.stack([nn.functional.cross_entropy(p, t) for p, t in zip(
        want_preds.reshape(-1, micro, 3), y.reshape(-1, micro))]).reshape(grid[:2])
    resolved = poptorch.OutputMode.Final if mode == poptorch.OutputMode.Default else mode
    torch.testing.assert_close(preds, _expected(want_preds, steps, replicas, resolved, period))
    torch.testing.assert_close(losses, _expected(want_losses, steps, replicas, resolved,
                                                 period))


@pytest.mark.parametrize("mode, period, iterations, replicas",
                         _valid([(4, 2)]))
def test_inference_outputs_by_mode_match_torch(mode, period, iterations, replicas):
    net = Net()
    opts = poptorch.Options().deviceIterations(iterations).replicationFactor(replicas)
    opts.outputMode(mode, period)
    x, _ = _batch(iterations * replicas * 2)
    got = poptorch.inferenceModel(net, opts)(x)
    resolved = poptorch.OutputMode.All if mode == poptorch.OutputMode.Default else mode
    want = net(x).detach().reshape(iterations, replicas, 2, 3)
    torch.testing.assert_close(got, _expected(want, iterations, replicas, resolved, period))


# -- dynamic shapes --------------------------------------------------------------------------
def test_a_boolean_mask_read_is_refused_with_poptorchs_alternatives():
    class Positive(nn.Module):
        def forward(self, x):
            return x[x > 0] * 2

    with pytest.raises(poptorch.Error, match=r"boolean-mask selection \(x\[mask\]\).*"
                                             r"test_poptorch_errors.py:\d+: return x\[x > 0\] "
                                             r"\* 2.*torch.where"):
        poptorch.inferenceModel(Positive())(torch.randn(4))
    x = torch.randn(4)  # the static form PopTorch suggests runs, as torch computes it

    class Where(nn.Module):
        def forward(self, x):
            return torch.where(x > 0, x * 2, torch.zeros_like(x))

    torch.testing.assert_close(poptorch.inferenceModel(Where())(x), Where()(x))


# -- Training options ------------------------------------------------------------------------
@pytest.mark.parametrize("reduction", [poptorch.ReductionType.Sum, poptorch.ReductionType.Mean])
def test_accumulation_reduction_sums_or_averages_micro_batch_gradients(reduction):
    torch.manual_seed(2)
    net = Net()
    reference = copy.deepcopy(net)
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(2).accumulationAndReplicationReductionType(reduction)
    opts.Training.setMeanAccumulationAndReplicationReductionStrategy(
        poptorch.MeanReductionStrategy.Running)
    assert opts.Training.meanAccumulationAndReplicationReductionStrategy == \
        poptorch.MeanReductionStrategy.Running  # PopTorch's read-back name
    x, y = _batch(4)
    poptorch.trainingModel(net, opts, torch.optim.SGD(net.parameters(), lr=0.5))(x, y)
    loss = sum(nn.functional.cross_entropy(reference(x[i:i + 2]), y[i:i + 2]) for i in (0, 2))
    if reduction == poptorch.ReductionType.Mean:
        loss = loss / 2
    loss.backward()
    torch.optim.SGD(reference.parameters(), lr=0.5).step()
    torch.testing.assert_close(net.fc.weight.detach(), reference.fc.weight.detach())
    with pytest.raises(ValueError, match="NoReduction"):
        opts.clone().Training.accumulationAndReplicationReductionType(
            poptorch.ReductionType.NoReduction)
