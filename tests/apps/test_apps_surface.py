"""Every popxl, popxl-addons, popdist and PopART name that Graphcore's PopXL large-model
applications (GPT-J, GPT-3, BERT, T5, Bloom; SDK 3.4) use resolves through the compat aliases
(``import popxl`` / ``popxl_addons`` / ``popart`` / ``popdist`` under the runner), and some test
of this suite exercises it; the few names added for them behave as in PopXL."""

from __future__ import annotations

import importlib
import sys
import typing
from pathlib import Path

import numpy as np
import pytest

import xlgraph
from xlgraph import ops
from xlgraph.errors import ShapeError

TESTS = Path(__file__).resolve().parent.parent

NAMES = (
    "popart.DeviceInfo",
    "popart._internal.ir",
    "popart.versionString",
    "popdist.getInstanceIndex",
    "popdist.getNumInstances",
    "popdist.isPopdistEnvSet",
    "popxl.HostToDeviceStream",
    "popxl.Ir",
    "popxl.RemoteBuffer",
    "popxl.ReplicaGrouping",
    "popxl.Session",
    "popxl.Tensor",
    "popxl.TensorByRef",
    "popxl.TensorSpec",
    "popxl.constant",
    "popxl.context",
    "popxl.context.get_current_context",
    "popxl.create_seeds",
    "popxl.d2h_stream",
    "popxl.dtype",
    "popxl.float16",
    "popxl.float32",
    "popxl.gcg",
    "popxl.gir",
    "popxl.h2d_stream",
    "popxl.in_sequence",
    "popxl.int32",
    "popxl.io_tiles",
    "popxl.ops",
    "popxl.ops.add_",
    "popxl.ops.argmax",
    "popxl.ops.call",
    "popxl.ops.cast",
    "popxl.ops.collectives.replicated_all_gather",
    "popxl.ops.collectives.replicated_all_reduce",
    "popxl.ops.collectives.replicated_reduce_scatter",
    "popxl.ops.concat",
    "popxl.ops.concat_",
    "popxl.ops.dropout",
    "popxl.ops.gather",
    "popxl.ops.gelu",
    "popxl.ops.greater",
    "popxl.ops.host_load",
    "popxl.ops.host_store",
    "popxl.ops.identity",
    "popxl.ops.init",
    "popxl.ops.mean",
    "popxl.ops.remote_code_load",
    "popxl.ops.remote_load",
    "popxl.ops.remote_store",
    "popxl.ops.rename",
    "popxl.ops.repeat",
    "popxl.ops.softmax",
    "popxl.ops.split",
    "popxl.ops.split_random_seed",
    "popxl.ops.sqrt",
    "popxl.ops.squeeze",
    "popxl.ops.tanh",
    "popxl.ops.transpose_",
    "popxl.remote_buffer",
    "popxl.tensor",
    "popxl.tensor.HostTensor",
    "popxl.tensor.Variable",
    "popxl.transforms.decompose_sum",
    "popxl.transforms.merge_exchange",
    "popxl.uint32",
    "popxl.utils",
    "popxl.utils.to_numpy",
    "popxl.variable",
    "popxl_addons.GIT_COMMIT",
    "popxl_addons.GraphWithNamedArgs",
    "popxl_addons.InputStreams",
    "popxl_addons.Module",
    "popxl_addons.NamedTensors",
    "popxl_addons.NamedVariableFactories",
    "popxl_addons.OutputStreams",
    "popxl_addons.TaskSession",
    "popxl_addons.WeightsDict",
    "popxl_addons.array_munging.pad_axis",
    "popxl_addons.array_munging.repeat",
    "popxl_addons.array_munging.repeat_shard",
    "popxl_addons.array_munging.shard",
    "popxl_addons.array_munging.shard2D",
    "popxl_addons.array_munging.tensor_parallel_input",
    "popxl_addons.array_munging.tensor_parallel_output",
    "popxl_addons.array_munging.unshard",
    "popxl_addons.array_munging.unshard_arrays",
    "popxl_addons.autodiff",
    "popxl_addons.autodiff_with_accumulation",
    "popxl_addons.cross_entropy_with_grad",
    "popxl_addons.dot_tree.DotTree",
    "popxl_addons.graph.GraphWithNamedArgs",
    "popxl_addons.host_load",
    "popxl_addons.host_store",
    "popxl_addons.layers.Embedding",
    "popxl_addons.layers.LayerNorm",
    "popxl_addons.layers.Linear",
    "popxl_addons.layers.layer_norm_distributed.LayerNormDistributed",
    "popxl_addons.layers.linear_gq.LinearGQ",
    "popxl_addons.layers.linear_gq.group_quantize_compress_numpy",
    "popxl_addons.named_replica_grouping.NamedReplicaGrouping",
    "popxl_addons.named_replica_grouping.fill_none_group",
    "popxl_addons.named_replica_grouping.get_ild_replica_grouping",
    "popxl_addons.named_tensors.NamedTensorData",
    "popxl_addons.named_tensors.NamedTensors",
    "popxl_addons.ops.cross_entropy_sharded_loss.cross_entropy_sharded_loss",
    "popxl_addons.ops.grad_reduce_square_add.grad_reduce_square_add",
    "popxl_addons.ops.replicated_all_reduce_TP.replicated_all_reduce",
    "popxl_addons.ops.replicated_all_reduce_TP.replicated_all_reduce_identical_grad_inputs",
    "popxl_addons.ops.replicated_all_reduce_TP.replicated_all_reduce_identical_inputs",
    "popxl_addons.ops.rotary_pos_embed.rotary_pos_embed",
    "popxl_addons.ops.rotary_pos_embed.trig_table_constants",
    "popxl_addons.optimizers.adam.AdamOptimizerStep",
    "popxl_addons.patterns.apply_pre_alias_patterns",
    "popxl_addons.recompute_graph",
    "popxl_addons.remote.NamedRemoteBuffers",
    "popxl_addons.remote.create_remote_buffer",
    "popxl_addons.remote.load_remote_graph",
    "popxl_addons.remote.named_variable_buffers",
    "popxl_addons.remote.store_remote_graph",
    "popxl_addons.rts.all_gather_replica_sharded_graph",
    "popxl_addons.rts.reduce_replica_sharded_graph",
    "popxl_addons.rts.reduce_replica_sharded_tensor",
    "popxl_addons.rts.replica_sharded_spec",
    "popxl_addons.seed_variable",
    "popxl_addons.set_available_memory_proportion_by_ipu",
    "popxl_addons.task_session.TaskSession",
    "popxl_addons.testing_utils.ops_of_type",
    "popxl_addons.timer",
    "popxl_addons.transforms.autodiff",
    "popxl_addons.transforms.autodiff_with_accumulation",
    "popxl_addons.transforms.batch_serialisation.batch_serial_buffer",
    "popxl_addons.transforms.recompute_graph",
    "popxl_addons.transforms.repeat_graph.repeat_graph",
    "popxl_addons.transforms.use_fc_pass.disable_fc_pass",
    "popxl_addons.utils.OrderedDict",
    "popxl_addons.utils.WeightsDict",
    "popxl_addons.utils.timer",
    "popxl_addons.variable_factory.NamedVariableFactories",
)


@pytest.fixture(scope="module")
def compat():
    """The runner's aliases in this process, removed afterwards."""
    import xlgraph.popxl_compat as pc

    before = {n for n in ("popart", "popart._internal", "popart._internal.ir", "popdist")
              if n in sys.modules}
    pc.activate()
    yield
    pc.uninstall()
    for name in ("popart", "popart._internal", "popart._internal.ir", "popdist"):
        if name not in before:
            sys.modules.pop(name, None)


def _resolve(name: str) -> tuple[str, object]:
    """``a.b.c`` as ``import a.b`` then ``getattr`` (the longest importable module first):
    the real name of the module imported, and the object."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        obj: object = module
        for part in parts[i:]:
            obj = getattr(obj, part)
        return module.__name__, obj
    raise ModuleNotFoundError(name)


@pytest.mark.parametrize("name", NAMES)
def test_name_resolves_through_the_aliases(name: str, compat: None) -> None:
    module, obj = _resolve(name)
    assert module.startswith("xlgraph"), f"{name} resolved outside xlgraph: {module}"
    home = getattr(obj, "__module__", None)
    if callable(obj) and isinstance(home, str) and not home.startswith("typing"):
        assert home.startswith("xlgraph"), f"{name} is defined in {home}"


def _test_sources() -> str:
    """The tests' code, but the list above."""
    here = Path(__file__).read_text()
    head, _, tail = here.partition("NAMES = (")
    return "\n".join([head, tail.partition("\n)\n")[2]] + [
        p.read_text() for p in TESTS.rglob("test_*.py") if p.resolve() != Path(__file__).resolve()])


def test_every_name_is_exercised_by_a_test() -> None:
    sources = _test_sources()
    untested = [n for n in NAMES if n.rsplit(".", 1)[-1] not in sources]
    assert not untested, untested


def test_host_tensor_aliases() -> None:
    from xlgraph.tensor import HostScalarTensor, HostTensor, TensorLike

    assert np.ndarray in typing.get_args(HostTensor)
    assert int in typing.get_args(HostScalarTensor) and float in typing.get_args(HostScalarTensor)
    assert xlgraph.Tensor in typing.get_args(TensorLike)


def test_get_current_context_reads_the_stacks() -> None:
    from xlgraph.context import get_current_context

    ir = xlgraph.Ir()
    ctx = get_current_context()
    with pytest.raises(RuntimeError, match="no current graph"):
        _ = ctx.graph
    with ir.main_graph:
        assert ctx.graph is ir.main_graph and ctx.main_graph is ir.main_graph
        assert ctx.ipu_id == 0 and not ctx.io_tile_set and not ctx.in_sequence
        with xlgraph.ipu(1), xlgraph.io_tiles(), xlgraph.in_sequence(), xlgraph.name_scope("a"):
            assert ctx.ipu_id == 1 and ctx.io_tile_set and ctx.in_sequence
            assert ctx.name_scopes == ["a"]
        g = ir.create_graph(lambda x: x + 1, xlgraph.TensorSpec((2,), xlgraph.float32))
        with g:
            assert get_current_context().graph is g


def test_op_debug_context_names_the_callers_line() -> None:
    from xlgraph.context import get_current_context, op_debug_context
    from xlgraph.ops.utils import check_in_graph

    @op_debug_context
    def scaled_matmul(a: xlgraph.Tensor, b: xlgraph.Tensor) -> xlgraph.Tensor:
        check_in_graph(get_current_context().graph, a=a, b=b)
        return (a @ b) * 2.0

    @op_debug_context("named")
    def plain(a: xlgraph.Tensor) -> xlgraph.Tensor:
        return a + 1.0

    assert scaled_matmul.__name__ == "scaled_matmul"
    ir = xlgraph.Ir()
    with ir.main_graph:
        a = xlgraph.variable(np.ones((2, 3), np.float32))
        with pytest.raises(ShapeError) as err:
            scaled_matmul(a, a)  # the line errors must name
        line = err.value.__traceback__.tb_lineno
        assert f"test_apps_surface.py:{line}" in str(err.value)
        assert plain(a).shape == (2, 3)
    with pytest.raises(TypeError, match="op_debug_context"):
        op_debug_context(3)


def test_check_in_graph_and_placement() -> None:
    from xlgraph.ops.utils import (
        check_in_graph,
        check_tensor_ipu_and_tile_set,
        handle_negative_axis,
    )

    ir = xlgraph.Ir()
    with ir.main_graph:
        x = xlgraph.variable(np.ones(2, np.float32), name="x")
        g = ir.create_graph(lambda t: t * 2, x)
        check_in_graph(ir.main_graph, x=x, many=[x, x])
        with pytest.raises(ValueError, match="`t` .* not in the current graph"):
            check_in_graph(ir.main_graph, t=g.inputs[0])
        with pytest.raises(TypeError, match="must be a Tensor"):
            check_in_graph(ir.main_graph, t=np.ones(2))
        with xlgraph.ipu(1):
            y = x + 1
        check_tensor_ipu_and_tile_set(a=x, b=[x * 3])
        with pytest.raises(ValueError, match="`a` is on IPU 0 .* `b` is on IPU 1"):
            check_tensor_ipu_and_tile_set(a=x, b=y)
        assert handle_negative_axis(x, -1) == 0 and handle_negative_axis(x, 0) == 0


def test_session_options_the_applications_set() -> None:
    """The PopART options the applications set through ``ir._pb_ir.getSessionOptions()``."""
    ir = xlgraph.Ir(replication=2)
    opts = ir._pb_ir.getSessionOptions()
    assert opts is ir.session_options
    opts.enableStochasticRounding = True
    opts.partialsTypeMatMuls = "half"
    opts.engineOptions["target.syncReplicasIndependently"] = "true"
    opts.numIOTiles = 32
    opts.rearrangeAnchorsOnHost = False
    opts.rearrangeStreamsOnHost = False
    opts.replicatedCollectivesSettings.prepareScheduleForMergingCollectives = True
    opts.replicatedCollectivesSettings.mergeAllReduceCollectives = True
    assert opts.changed >= {"enableStochasticRounding", "partialsTypeMatMuls", "numIOTiles"}
    assert opts.engineOptions == {"target.syncReplicasIndependently": "true"}
    with pytest.raises(AttributeError, match="numIOTiles"):
        opts.numIoTiles = 3
    with ir.main_graph:
        x = xlgraph.variable(np.ones(2, np.float32))
        ops.host_store(xlgraph.d2h_stream((2,), xlgraph.float32), x + 1)
    session = xlgraph.Session(ir, "cpu")
    session._pb_session.setEngineIsLoaded(True)
    assert [op.opType() for op in ir.main_graph._pb_graph.getOps()].count("Add") == 1


def test_popart_version_and_device_info(compat: None) -> None:
    import popart

    major, minor, *_ = popart.versionString().split(".")
    assert major.isdigit() and minor.isdigit()
    assert popart.DeviceInfo().numIpus == 1


def test_concat_inplace_variant() -> None:
    ir = xlgraph.Ir()
    a, b = np.arange(4, dtype=np.float32).reshape(2, 2), np.ones((1, 2), np.float32)
    with ir.main_graph:
        out = ops.concat_([xlgraph.variable(a), xlgraph.variable(b)], axis=0)
        stream = xlgraph.d2h_stream(out.shape, out.dtype)
        ops.host_store(stream, out)
    with xlgraph.Session(ir, "cpu") as session:
        np.testing.assert_array_equal(session.run()[stream], np.concatenate([a, b]))


def test_task_session_named_tensors_data() -> None:
    from xlgraph.addons import NamedTensors, TaskSession
    from xlgraph.addons.named_tensors import NamedTensorData

    ir = xlgraph.Ir()
    with ir.main_graph:
        w = xlgraph.variable(np.arange(3, dtype=np.float32), name="w")
        state = NamedTensors.from_dict({"layer.w": w})
    session = TaskSession([], [], state, 1, ir, "cpu")
    data = session.get_named_tensors_data()
    assert isinstance(data, NamedTensorData)
    np.testing.assert_array_equal(data.layer.w, np.arange(3))
