"""Idioms of the PopXL applications that PopXL and popxl-addons accept as written: torch
activations that require grad given to ``addons.host_load``, a vocabulary-sharded embedding
that gathers ``ids - offset`` with ``zero_OOR`` (negative indices give zero rows), and float16
weights updated with float32 scalar hyper-parameters (``scaled_add_``, ``AdamOptimizerStep``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import xlgraph as popxl
import xlgraph.addons as addons
from xlgraph import ops
from xlgraph.addons.optimizers.adam import AdamOptimizerStep


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
