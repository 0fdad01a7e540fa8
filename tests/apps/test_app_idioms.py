"""Idioms of the PopXL applications that PopXL and popxl-addons accept as written: torch
activations that require grad given to ``addons.host_load``, a vocabulary-sharded embedding
that gathers ``ids - offset`` with ``zero_OOR`` (negative indices give zero rows), float16
weights updated with float32 scalar hyper-parameters (``scaled_add_``, ``AdamOptimizerStep``),
graph checks that count PopART op classes, dummy inputs shaped by
``session._full_input_shape``, optional tensors tested for truth and ``graph._ir``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import xlgraph as popxl
import xlgraph.addons as addons
from xlgraph import ops
from xlgraph.addons.layers import LayerNorm, Linear
from xlgraph.addons.optimizers.adam import AdamOptimizerStep
from xlgraph.addons.testing_utils import ops_of_type
from xlgraph.popart_compat._internal import ir as _ir


def test_host_load_takes_torch_activations_that_require_grad() -> None:
    layer = torch.nn.Linear(8, 8)
    x = layer(torch.rand(2, 4, 8, requires_grad=True))  # in the autograd graph
    ir = popxl.Ir()
    with ir.main_graph:
        data, stream, t = addons.host_load(x.reshape(8, 8), popxl.float16, name="x")
        doubled = t * 2
        out = addons.host_store(doubled)
    assert stream.name == "x_stream" and t.name == "x" and stream.shape == (8, 8)
    assert data.dtype == np.float16 and out.name == f"{doubled.name}_stream"
    want = x.detach().numpy().reshape(8, 8).astype(np.float16)
    np.testing.assert_array_equal(data, want)
    session = popxl.Session(ir, "ipu_model")
    with session:
        got = session.run({stream: data})[out]
    np.testing.assert_array_equal(got, want * np.float16(2))


@pytest.mark.parametrize("tp", [2, 4])
def test_vocab_sharded_embedding_gathers_ids_minus_offset_with_zero_oor(tp: int) -> None:
    """Each replica holds rows ``[k*S, (k+1)*S)`` and a grouped ``offset`` variable ``k*S``;
    tokens of lower shards become negative indices and must give zero rows, forward and
    backward, so the all-reduced lookup and the per-shard gradients equal the whole table's."""
    vocab, hidden, shard = 32, 4, 32 // tp
    rng = np.random.default_rng(0)
    table = rng.normal(size=(vocab, hidden)).astype(np.float32)
    ids = rng.integers(0, vocab, (2, 6)).astype(np.int32)
    seed = rng.normal(size=(2, 6, hidden)).astype(np.float32)
    ir = popxl.Ir(replication=tp)
    with ir.main_graph:
        per_replica = ir.replica_grouping(stride=1, group_size=1)
        w = popxl.variable(table.reshape(tp, shard, hidden), name="word",
                           replica_grouping=per_replica)
        offset = popxl.variable(np.arange(tp, dtype=np.int32) * shard, name="offset",
                                replica_grouping=per_replica)
        _, ids_stream, ids_t = addons.host_load(ids, popxl.int32, name="ids")

        def lookup(w: popxl.Tensor, local: popxl.Tensor) -> popxl.Tensor:
            return ops.gather(w, local, zero_OOR=True)

        graph = ir.create_graph(lookup, w, ids_t)
        grad_info = popxl.transforms.autodiff(graph, grads_required=graph.inputs[:1])
        rows_site = ops.call_with_info(graph, w, ids_t - offset)
        rows = rows_site.outputs[0]
        emb = ops.collectives.replicated_all_reduce(rows)
        (dw,) = ops.call(grad_info.graph, popxl.constant(seed),
                         inputs_dict=grad_info.inputs_dict(rows_site))
        outs = [addons.host_store(t) for t in (emb, rows, dw)]
    session = popxl.Session(ir, "ipu_model")
    with session:
        got = session.run({ids_stream: np.broadcast_to(ids, (tp, *ids.shape))})
    emb_got, rows_got, dw_got = (got[s] for s in outs)
    for r in range(tp):
        np.testing.assert_array_equal(emb_got[r], table[ids])
        mine = (ids >= r * shard) & (ids < (r + 1) * shard)
        np.testing.assert_array_equal(rows_got[r], np.where(mine[..., None], table[ids], 0))
        want_dw = np.zeros((vocab, hidden), np.float32)
        np.add.at(want_dw, ids.reshape(-1), seed.reshape(-1, hidden))
        np.testing.assert_allclose(dw_got[r], want_dw[r * shard:(r + 1) * shard], rtol=1e-6)
    assert (ids < shard).any() and (ids >= shard).any()  # both signs of local index occur


def test_float16_weight_scaled_add_with_float32_lr_input_stays_float16() -> None:
    """``scaled_add_(w16, upd16, b=-lr)`` with ``lr`` a float32 scalar loaded each step: the
    sum is formed in float32 and rounded once to the weight's float16."""
    rng = np.random.default_rng(1)
    w0 = rng.normal(size=(3, 5)).astype(np.float16)
    upd = rng.normal(size=(3, 5)).astype(np.float16)
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(w0, popxl.float16, name="w")
        lr_stream = popxl.h2d_stream((), popxl.float32, "lr")
        lr = ops.host_load(lr_stream, "lr")
        out = ops.scaled_add_(w, popxl.constant(upd), b=-lr)
        half_lr = ops.scaled_add(out, popxl.constant(upd.astype(np.float32)), a=0.5, b=lr)
        store = addons.host_store(half_lr)
    assert out.dtype == popxl.float16 and half_lr.dtype == popxl.float16
    session = popxl.Session(ir, "ipu_model")
    lr_value = np.float32(3e-3)
    with session:
        got = session.run({lr_stream: lr_value})[store]
        new_w = session.get_tensor_data(w)
    want_w = (w0.astype(np.float32) + upd.astype(np.float32) * -lr_value).astype(np.float16)
    np.testing.assert_array_equal(new_w, want_w)
    want = (want_w.astype(np.float32) * 0.5 + upd.astype(np.float32) * lr_value)
    np.testing.assert_array_equal(got, want.astype(np.float16))


def test_adam_step_on_float16_weights_with_float32_lr_tracks_adamw() -> None:
    """popxl-addons' optimizer graph as the training scripts build it: float16 weights and
    first moments, ``lr`` a float32 graph input; three steps track AdamW in float64."""
    rng = np.random.default_rng(2)
    w0 = rng.normal(size=(4, 6)).astype(np.float16)
    grads = rng.normal(size=(3, 4, 6)).astype(np.float16)
    lr, b1, b2, eps, wd = 1e-2, 0.9, 0.999, 1e-5, 0.01
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        w = popxl.variable(w0, popxl.float16, name="w")
        grad_stream = popxl.h2d_stream(w0.shape, popxl.float16, "grad")
        lr_stream = popxl.h2d_stream((), popxl.float32, "lr")
        grad, lr_t = ops.host_load(grad_stream), ops.host_load(lr_stream)
        facts, graph = AdamOptimizerStep().create_graph(
            w, grad.spec, lr=popxl.TensorSpec((), popxl.float32), beta1=b1, beta2=b2, eps=eps,
            weight_decay=wd)
        state = facts.init()
        graph.bind(state).call(w, grad, lr_t)
    assert state.first_order.dtype == popxl.float16 and w.dtype == popxl.float16
    session = popxl.Session(ir, "ipu_model")
    with session:
        for g in grads:
            session.run({grad_stream: g, lr_stream: np.float32(lr)})
        got = session.get_tensor_data(w)
    assert got.dtype == np.float16
    w, m, v = w0.astype(np.float64), 0.0, 0.0  # PopART's AdamW (decay inside the update)
    for t, g in enumerate(grads.astype(np.float64), 1):
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        w = w - lr * ((m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps) + wd * w)
    # float16 weights and first moments round at each step (unit roundoff 4.9e-4 of |w| <= 3)
    np.testing.assert_allclose(got, w, atol=3e-3)
    assert np.abs(got.astype(np.float32) - w0).max() > 0.02  # three steps of ~lr each


class SelfAttention(addons.Module):
    """BERT's self-attention as the application writes it: one q/k/v projection split in
    three, the additive mask ``(mask - 1) * 1000``, and the residual layer norm."""

    def __init__(self, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm = LayerNorm()

    def build(self, x: popxl.Tensor, mask: popxl.Tensor) -> popxl.Tensor:
        rows, hidden = x.shape
        self.qkv, self.output = Linear(3 * hidden), Linear(hidden)
        q, k, v = ops.split(self.qkv(x), 3, axis=-1)

        def heads(t: popxl.Tensor) -> popxl.Tensor:
            return t.reshape((rows, self.heads, hidden // self.heads)).transpose((1, 0, 2))

        scores = heads(q) @ heads(k).transpose((0, 2, 1))
        scores = scores * (1 / np.sqrt(hidden // self.heads)) + (mask - 1) * 1000
        z = (ops.softmax(scores, axis=-1) @ heads(v)).transpose((1, 0, 2))
        return self.norm(x + self.output(z.reshape((rows, hidden))))


def test_attention_graph_counts_popart_op_classes_by_their_cpp_names() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros((8, 16), np.float32))
        mask = popxl.variable(np.ones((1, 1, 8), np.float32))
        _, graph = SelfAttention(heads=4).create_graph(x, mask)
    pb_ops = graph.graph._pb_graph.getOps()
    counts = {cls: ops_of_type(pb_ops, getattr(_ir.op, cls))
              for cls in ("SubtractOp", "SplitOp", "GroupNormOp", "MatMulOp", "SoftmaxOp")}
    assert counts == {"SubtractOp": 1, "SplitOp": 1, "GroupNormOp": 1, "MatMulOp": 4,
                      "SoftmaxOp": 1}
    split = next(op for op in pb_ops if isinstance(op, _ir.op.SplitOp))
    assert split.opid.type == "Split" and split.outTensorCount() == 3
    sub = next(op for op in pb_ops if isinstance(op, _ir.op.SubtractOp))
    assert sub.opid.type == "Sub" and _ir.op.SubOp is _ir.op.SubtractOp
    assert ops_of_type(pb_ops, "GroupNormalization") == 1 == ops_of_type(pb_ops, "GroupNormOp")


def test_split_parts_and_their_gradient_through_one_op() -> None:
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(x)

        def first_and_last(t: popxl.Tensor) -> tuple[popxl.Tensor, popxl.Tensor]:
            a, _, c = ops.split(t, [1, 2, 3], axis=1)
            return a * 2.0, c

        graph = ir.create_graph(first_and_last, t)
        info = popxl.transforms.autodiff(graph)
        site = ops.call_with_info(graph, t)
        seeds = [popxl.constant(np.ones((4, 1), np.float32)),
                 popxl.constant(np.full((4, 3), 3.0, np.float32))]
        (dx,) = ops.call(info.graph, *seeds, inputs_dict=info.inputs_dict(site))
        outs = [addons.host_store(o) for o in (*site.outputs, dx)]
    session = popxl.Session(ir, "ipu_model")
    with session:
        got = session.run()
    np.testing.assert_array_equal(got[outs[0]], x[:, :1] * 2)
    np.testing.assert_array_equal(got[outs[1]], x[:, 3:])
    np.testing.assert_array_equal(got[outs[2]], [[2, 0, 0, 3, 3, 3]] * 4)


def test_dummy_inputs_from_full_input_shape_over_replicas_and_transfers() -> None:
    """The benchmark scripts' inputs: ``np.ones(session._full_input_shape(s.shape), ...)``
    for every expected input, leading ``(num_host_transfers, replicas)``. As the SQuAD
    inference benchmark, each stream is loaded once per run while ``num_host_transfers`` is 3:
    PopXL does not check it (xlgraph warns), later slices are not read and stay zero."""
    ir = popxl.Ir(replication=2)
    ir.num_host_transfers = 3
    with ir.main_graph:
        _, words, ids = addons.host_load(np.zeros((2, 4)), popxl.int32, name="words")
        _, scale, s = addons.host_load(np.zeros(()), popxl.float32, name="scale")
        out = addons.host_store(ops.cast(ids, popxl.float32) * s + 1.0)
    with pytest.warns(UserWarning, match="'words_stream' runs 1 time"):
        session = addons.TaskSession([words, scale], [out], addons.NamedTensors(), 1, ir, "cpu")
    assert session._extra_input_dims == (3, 2)
    assert session._full_input_shape(words.shape) == (3, 2, 2, 4)
    inputs = {st: np.ones(session._full_input_shape(st.shape), st.dtype.as_numpy())
              for st in session.expected_inputs()}
    with session:
        got = session.run(inputs)
    want = np.zeros((3, 2, 2, 4), np.float32)
    want[0] = 2.0
    np.testing.assert_array_equal(got[out], want)


def test_optional_tensor_arguments_are_tested_for_truth_and_loss_graphs_use_graph_ir() -> None:
    """GPT-3's LM head: ``if not word_embedding:`` declares its own weight; PopXL tensors have
    ``len`` (axis 0) and no ``__bool__``. The LM heads build their loss graph through
    ``fwd_graph.graph._ir``."""

    class Head(addons.Module):
        def build(self, x: popxl.Tensor, word_embedding: popxl.Tensor | None = None,
                  ) -> popxl.Tensor:
            if not word_embedding:
                word_embedding = self.add_variable_input(
                    "word_embedding", lambda: np.eye(4, dtype=np.float32))
            return x @ word_embedding.T

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((2, 4), np.float32))
        tied = popxl.variable(np.full((3, 4), 2.0, np.float32))
        own_facts, own = Head().create_graph(x)
        tied_facts, tied_graph = Head().create_graph(x, tied)
        loss = own.graph._ir.create_graph(lambda t: ops.sum(t), own.graph.outputs[0])
        assert own.graph._ir is ir and loss.ir is ir
        with pytest.raises(ValueError, match="Tensor is a scalar and doesn't have a length"):
            bool(popxl.constant(1.0))
    assert list(own_facts.keys()) == ["word_embedding"] and not list(tied_facts.keys())
    assert len(tied) == 3 and bool(tied)
    assert tied_graph.graph.outputs[0].shape == (2, 3) and own.graph.outputs[0].shape == (2, 4)
