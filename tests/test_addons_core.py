"""xlgraph.addons core: DotTree, NamedTensors, variable factories, Module naming, GraphCache,
bound graphs, autodiff with named args and accumulation, cross-entropy, layers, Adam.

Over 400 lines: one end-to-end check per core addons feature, sharing the small modules and
numpy references defined at the top; each feature's deeper cases live in tests/addons/.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

import xlgraph as popxl
import xlgraph.addons as addons
from xlgraph import ops
from xlgraph.addons import NamedTensors
from xlgraph.addons.dot_tree import DotTree


def run(ir, inputs=None, device="cpu", steps=1):
    """Run ``steps`` times, feeding row ``i`` of every input array to step ``i``."""
    with popxl.Session(ir, device) as s:
        for i in range(steps):
            step = {k: v[i] for k, v in (inputs or {}).items()} if steps > 1 else inputs
            outs = s.run(step or {})
        return outs, s


# -- DotTree -----------------------------------------------------------------------------------
def test_dot_tree_insert_get_flat_and_pack_round_trip():
    t = DotTree.from_dict({"a.b": 1, "a.c": 2, "d": 3})
    assert t.a.b == 1 and t.get("a.c") == 2 and t.keys() == ["a", "d"]
    assert t.keys_flat() == ["a.b", "a.c", "d"] and t.values_flat() == [1, 2, 3]
    assert t.len() == 2 and t.len_flat() == 3
    keys, values = t.unpack()
    assert DotTree.pack(keys, values).to_dict() == {"a.b": 1, "a.c": 2, "d": 3}
    assert t.map(lambda v: v * 10).to_dict() == {"a.b": 10, "a.c": 20, "d": 30}
    assert t.filter_keys(["a.c", "d"]).to_dict() == {"a.c": 2, "d": 3}
    with pytest.raises(ValueError, match="already has 'a'"):
        t.insert("a.b", 5)
    t.insert("a.b", 5, overwrite=True)
    assert t.pop("a.b") == 5 and "a.b" not in t
    c = t.copy()
    c.update({"e.f": 7})
    assert "e.f" in c and "e.f" not in t
    other = DotTree.from_dict({"a.c": "x", "d": "y", "z": "w"})
    assert t.to_mapping(other) == {2: "x", 3: "y"}
    assert addons.dot_tree.sanitise("a.b") == "a_b"


# -- Module, factories, naming ------------------------------------------------------------------
class Lin(addons.Module):
    def __init__(self, out: int):
        super().__init__()
        self.out = out

    def build(self, x):
        w = self.add_variable_input("weight", partial(np.random.normal, 0, 1, (x.shape[-1],
                                                                               self.out)))
        b = self.add_variable_input("bias", partial(np.zeros, self.out), popxl.float32)
        return x @ w + b


class Two(addons.Module):
    def __init__(self, cache=False):
        super().__init__(cache=cache)
        self.fc1 = Lin(4)
        self.fc2 = Lin(4)

    def build(self, x):
        return self.fc2(ops.relu(self.fc1(x)))


def numpy_two(x, v):
    h = np.maximum(x @ v["fc1.weight"] + v["fc1.bias"], 0)
    return h @ v["fc2.weight"] + v["fc2.bias"]


@pytest.mark.parametrize("cache", [False, True])
def test_module_names_inputs_by_attribute_and_calls_match_numpy(cache):
    np.random.seed(0)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.random.normal(size=(2, 4)).astype(np.float32), name="x")
        facts, graph = Two(cache=cache).create_graph(x)
        assert facts.keys_flat() == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
        assert graph.args.keys_flat() == facts.keys_flat()
        variables = facts.init()
        assert [v.name for v in variables.tensors] == sorted(facts.keys_flat())
        (y,) = graph.bind(variables).call(x)
        out = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(out, y)
    assert isinstance(variables.fc1.weight, popxl.Variable)
    if cache:  # fc1 and fc2 are alike: one outlined graph serves both
        assert len({g.name for g in graph.graph.called_graphs}) == 1
    outs, s = run(ir)
    vals = {k: s.get_tensor_data(v) for k, v in variables.named_tensors.items()}
    np.testing.assert_allclose(outs[out], numpy_two(s.get_tensor_data(x), vals), rtol=1e-5)


def test_graph_inputs_carry_the_attribute_name_scope():
    ir = popxl.Ir()
    with ir.main_graph:
        _, graph = Two().create_graph(popxl.TensorSpec((2, 4), popxl.float32))
    assert graph.args.fc1.weight.id.endswith("fc1/weight")


def test_variable_factory_data_sources_and_groups():
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        counter = iter([np.full(3, i, np.float32) for i in range(5)])
        f = addons.VariableFactory(counter, name="v",
                                   replica_grouping=ir.replica_grouping(group_size=2))
        v = f.create_tensor()
        assert v.shape == (3,) and v.shape_on_host == (2, 3)
        np.testing.assert_array_equal(v.initial_data, [[0, 0, 0], [1, 1, 1]])
        g = addons.VariableFactory(lambda: np.arange(4.0), name="w")  # float64 data: downcast
        assert g.dtype == popxl.float32 and g.create_tensor().dtype == popxl.float32
        s = addons.VariableFactory(lambda: np.zeros((3, 3)), shard_over=4)
        assert s.shape_on_replica == (3,) and s.meta_shape == (3, 3)
        with pytest.raises(ValueError, match="init_remote"):
            s.create_tensor("s")
        facts = addons.NamedVariableFactories(w=g)
        assert facts.replica_groupings.w.num_groups == 1


def test_from_list_from_variable_factories_and_get():
    seq = addons.Module.from_list([Lin(3), Lin(2)])
    ir = popxl.Ir()
    with ir.main_graph:
        facts, graph = seq.create_graph(popxl.TensorSpec((1, 5), popxl.float32))
        assert facts.keys_flat() == ["0.weight", "0.bias", "1.weight", "1.bias"]
        assert graph.graph.outputs[0].shape == (1, 2)
        assert seq.get("1").out == 2

        class Holder(addons.Module):
            def build(self):
                self.held = addons.Module.from_variable_factories(facts.values_flat())
                return self.held[3]

        facts2, g2 = Holder().create_graph()
        assert facts2.keys_flat() == ["held.0", "held.1", "held.2", "held.3"]
        assert len(g2.graph.inputs) == 4 and g2.graph.outputs[0] is g2.args.held.get(3)


# -- GraphCache and bound graphs ---------------------------------------------------------------
def test_graph_cache_one_graph_per_signature():
    cache = addons.GraphCache()

    def fn(x, scale):
        return x * scale

    ir = popxl.Ir()
    with ir.main_graph:
        spec = popxl.TensorSpec((2,), popxl.float32)
        g1 = cache.create_graph(fn, spec, 2.0)
        assert cache.create_graph(fn, spec, 2.0) is g1
        assert cache.create_graph(fn, spec, 3.0) is not g1
        assert cache.create_graph(fn, popxl.TensorSpec((3,), popxl.float32), 2.0) is not g1
        a = cache.create_graph(Lin(3), spec.__class__((1, 2), popxl.float32))
        b = cache.create_graph(Lin(3), popxl.TensorSpec((1, 2), popxl.float32))
        assert a is b  # a module of the same class and settings
    assert len(cache) == 4


def test_bound_graph_bind_call_and_io_map():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((1, 2), np.float32), name="x")
        facts, graph = Lin(3).create_graph(x)
        variables = facts.init()
        bound = graph.bind(variables)
        info = bound.call_with_info(x)
        io = bound.subgraph_io_map(x, outs=info.outputs)
        assert io[graph.args.weight] is variables.weight and io[graph.graph.inputs[0]] is x
        rebound = bound.bind({graph.args.bias: variables.bias})
        assert rebound.args[graph.args.bias] is variables.bias
        copy = graph.copy()
        assert copy.graph is graph.graph and copy.args.to_dict() == graph.args.to_dict()
        with pytest.raises(AttributeError, match="not a gradient graph"):
            graph.grad_graph_info  # noqa: B018


# -- autodiff ----------------------------------------------------------------------------------
def test_autodiff_with_named_args_matches_numpy_gradients():
    np.random.seed(1)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.random.normal(size=(3, 4)).astype(np.float32), name="x")
        facts, graph = Lin(2).create_graph(x)
        bwd = addons.autodiff(graph)
        assert bwd.grad_graph_info.expected_inputs[0].connection_type.name == "FwdGrad"
        variables = facts.init()
        fwd = graph.bind(variables).call_with_info(x)
        dy = popxl.constant(np.ones((3, 2), np.float32))
        bwd_info = bwd.call_with_info(dy, args=bwd.grad_graph_info.inputs_dict(fwd))
        grads = bwd.grad_graph_info.fwd_parent_ins_to_grad_parent_outs(fwd, bwd_info)
        streams = {}
        for name, t in variables.named_tensors.items():
            streams[name] = popxl.d2h_stream(t.shape, t.dtype, name)
            ops.host_store(streams[name], grads[t])
    outs, s = run(ir)
    xv = s.get_tensor_data(x)
    np.testing.assert_allclose(outs[streams["weight"]], xv.T @ np.ones((3, 2)), rtol=1e-5)
    np.testing.assert_allclose(outs[streams["bias"]], np.full(2, 3.0), rtol=1e-6)


def test_autodiff_with_accumulation_keeps_the_running_mean():
    ir = popxl.Ir()
    with ir.main_graph:
        x_stream = popxl.h2d_stream((1, 2), popxl.float32, "x")
        facts, graph = Lin(1).create_graph(popxl.TensorSpec((1, 2), popxl.float32))
        accum_facts, bwd = addons.autodiff_with_accumulation(
            graph, graph.args.tensors, grads_required=graph.graph.inputs[:1])
        # graph.args.tensors is sorted by tensor name: bias before weight
        assert accum_facts.keys_flat() == ["mean_accum_counter", "accum.bias", "accum.weight"]
        assert bwd.args.keys_flat() == accum_facts.keys_flat()
        variables = facts.init()
        accum = accum_facts.init()
        x = ops.host_load(x_stream)
        fwd = graph.bind(variables).call_with_info(x)
        dy = popxl.constant(np.ones((1, 1), np.float32))
        outs = bwd.bind(accum).call(dy, args=bwd.grad_graph_info.inputs_dict(fwd))
        assert len(outs) == 1 and outs[0].shape == (1, 2)  # only the input's gradient
    data = np.arange(6, dtype=np.float32).reshape(3, 1, 2)
    _, s = run(ir, {x_stream: data}, steps=3)
    np.testing.assert_allclose(s.get_tensor_data(accum.accum.weight), data.mean(0).T, rtol=1e-6)
    np.testing.assert_allclose(s.get_tensor_data(accum.accum.bias), [1.0])
    assert s.get_tensor_data(accum.mean_accum_counter) == 3


# -- ops ---------------------------------------------------------------------------------------
def np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("scaling", [1, 8])
def test_cross_entropy_with_grad_matches_numpy(scaling):
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(2, 3, 5)).astype(np.float32)
    labels = rng.integers(0, 5, (2, 3)).astype(np.int32)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(logits, name="x")
        lab = popxl.variable(labels, name="labels")
        loss, dx = addons.ops.cross_entropy_with_grad(x, lab, loss_scaling=scaling)
        plain = addons.ops.cross_entropy(x, lab)
        streams = [addons.ops.host_store(t) for t in (loss, dx, plain)]
    outs, _ = run(ir)
    p = np_softmax(logits.reshape(6, 5))
    ref_loss = -np.log(p[np.arange(6), labels.ravel()]).mean()
    onehot = np.eye(5)[labels.ravel()]
    np.testing.assert_allclose(outs[streams[0]], ref_loss, rtol=1e-5)
    np.testing.assert_allclose(outs[streams[2]], ref_loss, rtol=1e-5)
    np.testing.assert_allclose(outs[streams[1]], ((p - onehot) / 6 * scaling).reshape(2, 3, 5),
                               rtol=1e-4, atol=1e-7)


def test_host_load_helper_makes_a_stream():
    ir = popxl.Ir()
    with ir.main_graph:
        data, stream, t = addons.ops.host_load(np.array([1.0, 2.0]), popxl.float32, "in")
        assert stream.name == "in_stream" and data.dtype == np.float32 and t.name == "in"
        doubled = t * 2
        out = addons.ops.host_store(doubled)
        assert out.name == f"{doubled.name}_stream"
    outs, _ = run(ir, {stream: data})
    np.testing.assert_allclose(outs[out], [2.0, 4.0])


# -- layers ------------------------------------------------------------------------------------
def layer_output(module, x, **kwargs):
    ir = popxl.Ir()
    with ir.main_graph:
        xv = popxl.variable(x, name="x")
        facts, graph = module.create_graph(xv, **kwargs)
        variables = facts.init()
        (y,) = graph.bind(variables).call(xv)
        out = addons.ops.host_store(y)
    outs, s = run(ir)
    return outs[out], {k: s.get_tensor_data(v) for k, v in variables.named_tensors.items()}


def test_layers_match_numpy():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 6)).astype(np.float32)
    y, v = layer_output(addons.layers.Linear(3), x)
    np.testing.assert_allclose(y, x @ v["weight"] + v["bias"], rtol=1e-5)
    y, v = layer_output(addons.layers.LayerNorm(), x, eps=1e-5)
    ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y, ref * v["weight"] + v["bias"], rtol=1e-4, atol=1e-5)
    idx = rng.integers(0, 10, (2, 3)).astype(np.int32)
    y, v = layer_output(addons.layers.Embedding(popxl.float32, 10, 4), idx)
    np.testing.assert_allclose(y, v["weight"][idx])
    assert addons.layers.Embedding.get_vocab_shard_size(10, 4) == 16  # padded to 16 rows
    assert addons.layers.Embedding.get_offsets(10, 4).tolist() == [0, 16, 32, 48]
    img = rng.normal(size=(2, 3, 5, 5)).astype(np.float32)
    y, v = layer_output(addons.layers.Conv2D(4, 3, paddings=(1, 1, 1, 1)), img)
    w, b = v["weight"], v["bias"]
    padded = np.pad(img, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.zeros((2, 4, 5, 5), np.float32)
    for i in range(5):
        for j in range(5):
            ref[:, :, i, j] = np.einsum("nchw,ochw->no", padded[:, :, i:i + 3, j:j + 3], w)
    assert b.shape == (1, 4, 1, 1)  # popxl-addons keeps the bias as (1, out, 1, 1)
    np.testing.assert_allclose(y, ref + b, rtol=1e-4, atol=1e-5)


# -- optimiser ---------------------------------------------------------------------------------
@pytest.mark.parametrize("first_order_dtype", [popxl.float32, popxl.float16])
def test_adam_optimizer_step_matches_numpy(first_order_dtype):
    rng = np.random.default_rng(4)
    w0 = rng.normal(size=(3, 2)).astype(np.float32)
    grads = rng.normal(size=(3, 3, 2)).astype(np.float32)
    lr, b1, b2, eps, wd = 0.1, 0.9, 0.999, 1e-5, 0.01
    ir = popxl.Ir()
    with ir.main_graph:
        g_stream = popxl.h2d_stream((3, 2), popxl.float32, "g")
        w = popxl.variable(w0, name="w")
        facts, graph = addons.optimizers.AdamOptimizerStep().create_graph(
            w, popxl.TensorSpec((3, 2), popxl.float32), lr=lr, first_order_dtype=first_order_dtype)
        assert facts.keys_flat() == ["first_order", "second_order", "step"]
        state = facts.init()
        graph.bind(state).call(w, ops.host_load(g_stream))
    _, s = run(ir, {g_stream: grads}, steps=3)
    m = v = np.zeros_like(w0, np.float64)
    ref = w0.astype(np.float64)
    for t, g in enumerate(grads, 1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        ref = ref - lr * ((m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps) + wd * ref)
    tol = 1e-5 if first_order_dtype == popxl.float32 else 3e-3
    np.testing.assert_allclose(s.get_tensor_data(w), ref, rtol=tol, atol=tol)
    assert s.get_tensor_data(state.step) == 3


def test_seed_variable_and_named_tensors_remap():
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        seed, t = addons.seed_variable(7, ir.replica_grouping(group_size=1))
        assert t is seed
        assert seed.dtype == popxl.uint32 and seed.shape == (2,) and seed.shape_on_host == (2, 2)
        a = popxl.variable(1.0, name="a")
        b = popxl.variable(2.0, name="b")
    named = NamedTensors(x=a)
    assert named.remap({a: b}).x is b and named.tensors == (a,)


# -- TaskSession -------------------------------------------------------------------------------
def sgd_ir():
    ir = popxl.Ir()
    with ir.main_graph:
        streams = addons.InputStreams(x=((1, 2), popxl.float32))
        facts, graph = Lin(2).create_graph(popxl.TensorSpec((1, 2), popxl.float32))
        variables = facts.init()
        (y,) = graph.bind(variables).call(ops.host_load(streams.x))
        ops.scaled_add_(variables.bias, ops.sum(y, 0), b=-0.1)
        out = addons.OutputStreams(y=popxl.TensorSpec((1, 2), popxl.float32))
        ops.host_store(out.y, y)
    return ir, streams, out, variables


class Loader(list):
    """A data loader with the save/resume pair TaskSession.dataloader asks for."""

    def save(self, filename):
        with open(filename, "w") as f:
            f.write("position 0")

    def resume(self, filename):
        with open(filename) as f:
            assert f.read() == "position 0"


def test_task_session_runs_from_a_dataloader_and_round_trips_checkpoints(tmp_path):
    ir, streams, out, variables = sgd_ir()
    session = addons.TaskSession(streams, out, variables, 1, ir, "cpu")
    session.dataloader = Loader([(np.ones((1, 2), np.float32),),
                                 (np.full((1, 2), 2, np.float32),)])
    session.add_session_state_info({"steps": 3})
    with session:
        for _ in range(3):
            result = session.run()
        assert result[out.y].shape == (1, 2)
        session.save_checkpoint(tmp_path / "ckpt")
    saved = session.get_named_tensors_data()
    assert saved.keys_flat() == ["bias", "weight"]  # init() makes them in name order

    ir2, streams2, out2, variables2 = sgd_ir()
    other = addons.TaskSession(streams2, out2, variables2, 1, ir2, "cpu")
    other.load_checkpoint(tmp_path / "ckpt")
    assert other.session_state == {"steps": 6}  # 3, then 3 runs
    for name, data in other.get_named_tensors_data().to_dict().items():
        np.testing.assert_array_equal(data, saved.get(name))
    ir3, streams3, out3, variables3 = sgd_ir()
    third = addons.TaskSession(streams3, out3, variables3, 1, ir3, "cpu")
    third.load_from_session(other)
    np.testing.assert_array_equal(third.get_tensor_data(variables3.bias), saved.bias)
    with pytest.raises(ValueError, match="report_missing"):
        other.load_checkpoint(tmp_path / "ckpt", report_missing="loud")
    with pytest.raises(NotImplementedError, match="Weights & Biases"):
        other.wandb_variable_histograms()


def test_plain_ir_create_graph_of_an_addons_module_still_names_sub_module_inputs():
    ir = popxl.Ir()
    with ir.main_graph:
        module = Two()
        graph = ir.create_graph(module, popxl.TensorSpec((2, 4), popxl.float32))
    assert module._named_inputs.keys_flat() == ["fc1.weight", "fc1.bias", "fc2.weight",
                                                "fc2.bias"]
    assert len(graph.inputs) == 5


def train_step_of_two(cache):
    np.random.seed(0)
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        x = popxl.variable(np.random.normal(size=(3, 4)).astype(np.float32), name="x")
        facts, fwd = Two(cache=cache).create_graph(x)
        bwd = addons.autodiff(fwd)
        np.random.seed(1)  # factories probe their sources once each: draw alike from here
        variables = facts.init()
        info = fwd.bind(variables).call_with_info(x)
        dy = popxl.constant(np.ones((3, 4), np.float32))
        grad_info = bwd.call_with_info(dy, args=bwd.grad_graph_info.inputs_dict(info))
        grads = bwd.grad_graph_info.fwd_parent_ins_to_grad_parent_outs(info, grad_info)
        for t in variables.tensors:
            ops.scaled_add_(t, grads[t], b=-0.1)
    _, s = run(ir)
    return {k: s.get_tensor_data(t) for k, t in variables.named_tensors.items()}


def test_outlined_sub_modules_train_like_inlined_ones():
    inline, outlined = train_step_of_two(False), train_step_of_two(addons.GraphCache())
    assert list(inline) == list(outlined)
    for name in inline:
        np.testing.assert_allclose(outlined[name], inline[name], rtol=1e-5)
