"""PopTorch programs for each API group, written as a PopTorch user writes them, run against
torch eager: PopTorch's ops, options and sub-objects, pipelining annotations and the
optimisers (tests/test_poptorch_api_wrapper.py has the wrapper and the loaders)."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import xlgraph.poptorch as poptorch  # noqa: E402


# -- PopTorch's own operations -------------------------------------------------------------------
class OpsModel(nn.Module):
    """Every PopTorch op with a tensor result, in one forward."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x, start, flag):
        y = poptorch.nop(self.fc(x))
        y = poptorch.ipu_print_tensor(y, "activations")
        (y,) = poptorch.for_loop(3, lambda t: torch.tanh(t) * 1.5, [y])
        window = poptorch.dynamic_slice(y, 1, start, 2, 1)
        y = poptorch.dynamic_update(y, window * 3.0, 1, start + 2, 2)
        (y,) = poptorch.cond(flag, lambda a: a * 2.0, [y], lambda a: a - 1.0, [y])
        y = poptorch.recomputationCheckpoint(y)
        y = poptorch.set_available_memory(y, 0.4)
        mode = poptorch.MatMulSerializationMode.OutputChannels
        return y + poptorch.serializedMatMul(x, self.fc.weight.t(), mode, 3)


@pytest.mark.parametrize("flag", [True, False])
@pytest.mark.parametrize("start", [0, 1, 5])  # 5 is clamped so the window fits
def test_poptorch_ops_match_eager(flag, start, capfd):
    torch.manual_seed(0)
    model = OpsModel()
    x, s, f = torch.randn(4, 6), torch.tensor([start]), torch.tensor([flag])
    out = poptorch.inferenceModel(model)(x, s, f)
    torch.testing.assert_close(out, model(x, s, f).detach(), rtol=1e-5, atol=1e-5)
    assert "activations" in capfd.readouterr().err


def test_dynamic_slice_trains_like_narrow():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x, start, target):
            window = poptorch.dynamic_slice(self.fc(x), 1, start, 4, 1)
            return window, poptorch.identity_loss((window - target) ** 2, reduction="mean")

    torch.manual_seed(1)
    net = Net()
    reference = copy.deepcopy(net)
    x, target = torch.randn(4, 8), torch.randn(4, 4)
    model = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    model(x, torch.tensor([2]), target)
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    ((reference.fc(x).narrow(1, 2, 4) - target) ** 2).mean().backward()
    opt.step()
    torch.testing.assert_close(net.fc.weight.detach(), reference.fc.weight.detach())


@pytest.mark.parametrize("reduction", ["sum", "mean", "none"])
def test_identity_loss_reductions_train_as_their_gradient_says(reduction):
    torch.manual_seed(2)
    net = nn.Linear(5, 2)
    reference = copy.deepcopy(net)

    class WithLoss(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            out = self.inner(x)
            return out, poptorch.identity_loss(out * out, reduction=reduction)

    x = torch.randn(3, 5)
    model = poptorch.trainingModel(WithLoss(net), optimizer=torch.optim.SGD(net.parameters(),
                                                                             lr=0.05))
    _, loss = model(x)
    out = reference(x)
    value = {"sum": (out * out).sum(), "mean": (out * out).mean(), "none": (out * out).sum()}
    value[reduction].backward()  # "none" backpropagates ones, as sum does
    with torch.no_grad():
        for p in reference.parameters():
            p -= 0.05 * p.grad
    torch.testing.assert_close(net.weight.detach(), reference.weight.detach())
    expected = (out * out) if reduction == "none" else value[reduction]
    torch.testing.assert_close(loss, expected.detach())


def test_custom_op_runs_ops_xlgraph_has_and_refuses_others():
    class Net(nn.Module):
        def forward(self, x):
            (y,) = poptorch.custom_op([x], "Relu", "custom.ops", 1, example_outputs=[x])
            return y

    x = torch.randn(3, 4)
    torch.testing.assert_close(poptorch.inferenceModel(Net())(x), torch.relu(x))
    with pytest.raises(poptorch.Error, match="custom_op\\('LeakyCube'.*poptorch-support.md"):
        poptorch.custom_op([x], "LeakyCube", "custom.ops", 1, example_outputs=[x])


def test_cpu_multiconv_namescope_and_blocks_compute_as_unannotated():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 2, 3, padding=1)
            self.conv2 = nn.Conv2d(1, 2, 3, padding=1)
            self.fc = poptorch.BeginBlock(nn.Linear(4 * 16, 3), "head", ipu_id=1)
            self.double = poptorch.CPU(lambda t: t * 2.0, "double")

        def forward(self, x):
            with poptorch.Block("convs", ipu_id=0), poptorch.NameScope("convs"):
                with poptorch.MultiConv().planType(poptorch.MultiConvPlanType.Serial):
                    a, b = self.conv1(x), self.conv2(x)
            y = self.double(torch.cat([a, b], 1))
            return self.fc(torch.flatten(y, 1))

    torch.manual_seed(3)
    net = Net()
    x = torch.randn(2, 1, 4, 4)
    # two pipeline stages (PopTorch's default strategy): two micro-batches fill them
    model = poptorch.inferenceModel(net, poptorch.Options().useIpuModel(True).deviceIterations(2))
    torch.testing.assert_close(model(x), net(x).detach(), rtol=1e-5, atol=1e-5)
    assert model.blocks == {"convs": 0, "head": 1}
    assert model._compiled.session.device.model.num_ipus == 2  # the blocks span two IPUs
    poptorch.removeBlocks(net)
    assert "_poptorch_block" not in net.fc.__dict__


def test_block_function_and_pipelined_execution_size_the_ipu_model():
    @poptorch.BlockFunction("tail", ipu_id=2)
    def tail(t):
        return torch.relu(t)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            poptorch.Block.start("head", ipu_id=0)
            return tail(self.fc(x))

    opts = poptorch.Options().useIpuModel(True).deviceIterations(2)  # one per stage
    opts.setExecutionStrategy(poptorch.PipelinedExecution(
        poptorch.Stage("head").ipu(0), poptorch.Stage("tail").ipu(3)))
    net = Net()
    model = poptorch.inferenceModel(net, opts)
    x = torch.randn(2, 4)
    torch.testing.assert_close(model(x), net(x).detach())
    assert model.blocks == {"head": 0, "tail": 2}
    assert model._compiled.session.device.model.num_ipus == 4


# -- options ------------------------------------------------------------------------------------
class Regression(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 1)
        self.loss = nn.MSELoss()

    def forward(self, x, y):
        out = self.fc(x)
        return out, self.loss(out, y)


def _eager_sgd(net, batches, lr):
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    for x, y in batches:
        opt.zero_grad()
        nn.functional.mse_loss(net.fc(x), y).backward()
        opt.step()


def test_wrapper_options_resolve_the_default_output_mode():
    net = Regression()
    assert poptorch.trainingModel(net).options.output_mode == poptorch.OutputMode.Final
    assert poptorch.inferenceModel(net).options.output_mode == poptorch.OutputMode.All
    opts = poptorch.Options().outputMode(poptorch.OutputMode.EveryN, 2)
    wrapped = poptorch.inferenceModel(net, opts)
    assert wrapped.options.output_mode == poptorch.OutputMode.EveryN
    assert wrapped.options.output_return_period == 2
    assert opts.output_mode == poptorch.OutputMode.EveryN


@pytest.mark.parametrize("strategy", list(poptorch.MeanReductionStrategy))
def test_gradient_accumulation_mean_strategies_average_micro_batches(strategy):
    torch.manual_seed(4)
    net = Regression()
    reference = copy.deepcopy(net)
    x, y = torch.randn(12, 4), torch.randn(12, 1)
    opts = poptorch.Options().deviceIterations(2)
    opts.Training.gradientAccumulation(3).setMeanAccumulationAndReplicationReductionStrategy(
        strategy)
    model = poptorch.trainingModel(net, opts, torch.optim.SGD(net.parameters(), lr=0.1))
    model(x, y)
    _eager_sgd(reference, [(x[:6], y[:6]), (x[6:], y[6:])], 0.1)  # one step per 3 x batch 2
    torch.testing.assert_close(net.fc.weight.detach(), reference.fc.weight.detach())


@pytest.mark.parametrize("group_type", [poptorch.CommGroupType.Consecutive,
                                        poptorch.CommGroupType.Orthogonal])
def test_input_replica_grouping_feeds_a_group_the_same_batch(group_type):
    torch.manual_seed(5)
    net = Regression()
    reference = copy.deepcopy(net)
    opts = poptorch.Options().replicationFactor(4).inputReplicaGrouping(2, group_type)
    loader = poptorch.DataLoader(opts, list(range(6)), batch_size=3)
    assert loader.combinedBatchSize == 6  # two distinct inputs for four replicas
    x, y = torch.randn(6, 4), torch.randn(6, 1)
    model = poptorch.trainingModel(net, opts, torch.optim.SGD(net.parameters(), lr=0.1))
    model(x, y)
    # four replicas read two batches twice each: the mean gradient is the two batches' mean
    _eager_sgd(reference, [(x, y)], 0.1)
    torch.testing.assert_close(net.fc.weight.detach(), reference.fc.weight.detach())


def test_option_sub_objects_read_back_and_freeze(tmp_path):
    opts = poptorch.Options()
    opts.Jit.traceModel(False)
    opts.Precision.halfFloatCasting(poptorch.HalfFloatCastingBehavior.HalfUpcastToFloat)
    opts.Precision.runningStatisticsAlwaysFloat(False)
    opts._Popart.set("saveInitializersToFile", "weights.onnx")
    opts._Popart.setPatterns({"PadSum": True}, 0)
    opts.TensorLocations.numIOTiles(32)
    opts.TensorLocations.setWeightLocation(
        poptorch.TensorLocationSettings().useOnChipStorage(False).minElementsForOffChip(10))
    opts.Distributed.configureProcessId(1, 2)
    opts.setAvailableMemoryProportion({"IPU0": 0.3}).connectionType(
        poptorch.ConnectionType.OnDemand).syncPattern(poptorch.SyncPattern.SinglePipeline)
    assert opts.Jit.trace_model is False and opts._Popart.saveInitializersToFile == "weights.onnx"
    assert (opts.Distributed.processId, opts.Distributed.numProcesses) == (1, 2)
    assert opts.TensorLocations.weight.min_elements_for_off_chip == 10
    assert opts.available_memory_proportion == {"IPU0": 0.3}
    as_dict = opts.toDict()
    assert as_dict["Jit"]["trace_model"] is False and as_dict["TensorLocations"]["num_io_tiles"]
    path = tmp_path / "opts.txt"
    path.write_text("deviceIterations(4)\nTraining.gradientAccumulation(2)  # comment\n")
    loaded = poptorch.Options().loadFromFile(str(path)).from_json('{"replicationFactor": 2}')
    assert (loaded.device_iterations, loaded.Training.gradient_accumulation,
            loaded.replication_factor) == (4, 2, 2)
    path.write_text("noSuchSetter(3)\n")
    with pytest.raises(poptorch.ConfigFileError, match="opts.txt:1"):
        poptorch.Options().loadFromFile(str(path))
    poptorch.DataLoader(opts, list(range(4)))  # freezes opts and its sub-objects
    with pytest.raises(AttributeError, match="frozen"):
        opts.Jit.traceModel(True)
    with pytest.raises(AttributeError, match="frozen"):
        opts.TensorLocations.numIOTiles(64)
    with pytest.raises(ValueError, match="IPU"):
        poptorch.Options().setAvailableMemoryProportion({"GPU0": 0.5})


def test_distributed_processes_read_their_share_of_the_dataset():
    opts = poptorch.Options()
    opts.Distributed.configureProcessId(1, 2)
    loader = poptorch.DataLoader(opts, list(range(10)), batch_size=2)
    assert [b.tolist() for b in loader] == [[4, 5], [6, 7]]  # a contiguous block, as PopTorch


def test_synthetic_data_feeds_zeros():
    net = nn.Linear(3, 2)
    model = poptorch.inferenceModel(net, poptorch.Options().enableSyntheticData(True))
    torch.testing.assert_close(model(torch.randn(4, 3)), net(torch.zeros(4, 3)).detach())


# -- optimisers ---------------------------------------------------------------------------------
def test_parameter_groups_keep_their_own_hyperparameters():
    torch.manual_seed(6)
    net = Regression()
    reference = copy.deepcopy(net)

    def groups(m):
        return [{"params": [m.fc.weight], "lr": 0.2, "momentum": 0.9},
                {"params": [m.fc.bias], "lr": 0.01, "weight_decay": 0.1}]

    optimizer = poptorch.optim.SGD(groups(net), lr=0.05)
    model = poptorch.trainingModel(net, poptorch.Options().deviceIterations(3), optimizer)
    x, y = torch.randn(6, 4), torch.randn(6, 1)
    model(x, y)
    eager = torch.optim.SGD(groups(reference), lr=0.05)
    for i in range(3):
        eager.zero_grad()
        nn.functional.mse_loss(reference.fc(x[2 * i:2 * i + 2]), y[2 * i:2 * i + 2]).backward()
        eager.step()
    torch.testing.assert_close(net.fc.weight.detach(), reference.fc.weight.detach())
    torch.testing.assert_close(net.fc.bias.detach(), reference.fc.bias.detach())
    optimizer.param_groups[1]["lr"] = 0.5  # setOptimizer changes each group's rate
    model.setOptimizer(optimizer)
    assert model._compiled.optimizer.groups[1][0].lr == 0.5


@pytest.mark.filterwarnings("ignore:overflow encountered")  # float16 overflow is the point
def test_loss_scaling_scales_the_loss_and_unscales_the_gradients():
    class Half(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 1).half()

        def forward(self, x, y):
            return poptorch.identity_loss(((self.fc(x) - y) ** 2).sum(), reduction="sum")

    def train(scaling):
        torch.manual_seed(7)
        net = Half()
        opt = poptorch.optim.SGD(net.parameters(), lr=1e-3, loss_scaling=scaling)
        x, y = torch.full((2, 4), 8.0).half(), torch.zeros(2, 1).half()
        poptorch.trainingModel(net, optimizer=opt)(x, y)
        return net.fc.weight.detach().float()

    unscaled, scaled = train(1.0), train(4.0)
    assert torch.isfinite(unscaled).all()
    torch.testing.assert_close(scaled, unscaled, rtol=2e-3, atol=2e-3)  # same update
    overflow = train(6e4)  # the scaled gradient overflows float16, as on the IPU
    assert not torch.isfinite(overflow).all()


def test_max_grad_norm_clips_the_global_norm_like_torch():
    torch.manual_seed(8)
    net = Regression()
    reference = copy.deepcopy(net)
    x, y = torch.randn(4, 4) * 10, torch.randn(4, 1)
    opt = poptorch.optim.SGD(net.parameters(), lr=0.1, max_grad_norm=0.5)
    poptorch.trainingModel(net, optimizer=opt)(x, y)
    nn.functional.mse_loss(reference.fc(x), y).backward()
    torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.5)
    torch.optim.SGD(reference.parameters(), lr=0.1).step()
    torch.testing.assert_close(net.fc.weight.detach(), reference.fc.weight.detach(),
                               rtol=1e-4, atol=1e-5)


def test_float16_accumulators_round_as_float16():
    torch.manual_seed(9)
    net = Regression()
    reference = copy.deepcopy(net)
    opt = poptorch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9,
                             velocity_accum_type=torch.float16, accum_type=torch.float16)
    model = poptorch.trainingModel(net, poptorch.Options().deviceIterations(2), opt)
    x, y = torch.randn(4, 4) / 3, torch.randn(4, 1) / 3
    model(x, y)
    velocity = [torch.zeros_like(p) for p in reference.parameters()]
    for i in range(2):  # torch's momentum SGD with both accumulators rounded to float16
        reference.zero_grad()
        nn.functional.mse_loss(reference.fc(x[2 * i:2 * i + 2]), y[2 * i:2 * i + 2]).backward()
        with torch.no_grad():
            for p, v in zip(reference.parameters(), velocity):
                g = p.grad.half().float()
                v.copy_((v * 0.9 + g) if i else g)
                p -= 0.1 * v
                v.copy_(v.half().float())
    torch.testing.assert_close(net.fc.weight.detach(), reference.fc.weight.detach(),
                               rtol=1e-6, atol=1e-6)


def test_optimizer_extras_and_variable_attributes():
    params = [nn.Parameter(torch.zeros(2))]
    opt = poptorch.optim.Adam(params, lr=0.01, loss_scaling=8.0, max_grad_norm=1.0,
                              first_order_momentum_accum_type=torch.float16)
    assert opt.poptorch_extras["loss_scaling"] == 8.0
    assert not opt.variable_attrs.isConstant("lr") and opt.variable_attrs.isConstant("eps")
    opt.variable_attrs.markAsVariable("eps")
    assert not opt.variable_attrs.isConstant("eps")
    with pytest.raises(ValueError, match="amsgrad"):
        poptorch.optim.AdamW(params, amsgrad=True)
    assert poptorch.optim.LAMB(params).defaults["max_weight_norm"] == 65500.0
    state = opt.state_dict()
    assert "ipu_state" in state and not opt.has_state()
