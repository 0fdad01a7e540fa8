"""A Megatron-style tensor-parallel block written with popxl-addons' custom ops, as the
GPT/BERT applications use them: column-parallel matmul behind ``identical_inputs``, a layer
norm over the split hidden dimension, row-parallel matmul closed by ``identical_grad_inputs``,
rotary embedding, vocabulary-parallel logits and the sharded cross-entropy. Over 2 replicas
(one tensor-parallel pair) and 4 (two pairs, data-parallel, strided), the loss equals the
unsplit model's in numpy, and the gradients match float64 finite differences of it."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph
from tests.addons.replicas import BACKENDS, members, run
from xlgraph import ops
from xlgraph.addons.ops.cross_entropy_sharded_loss import cross_entropy_sharded_loss
from xlgraph.addons.ops.layer_norm_distributed import layer_norm_distributed
from xlgraph.addons.ops.replicated_all_reduce_TP import (
    replicated_all_reduce_identical_grad_inputs,
    replicated_all_reduce_identical_inputs,
)
from xlgraph.addons.ops.rotary_pos_embed import rotary_pos_embed, trig_tables

N, SEQ, HIDDEN, FFN, VOCAB, TP = 2, 3, 4, 6, 8, 2


def _rotate(x, sin, cos):
    """(N, SEQ, 1, HIDDEN) turned pairwise by position (numpy)."""
    a, b = x[..., 0::2], x[..., 1::2]
    s, c = sin[None, :, None, :], cos[None, :, None, :]
    out = x.copy()
    out[..., 0::2], out[..., 1::2] = a * c - b * s, b * c + a * s
    return out


def _full_loss(x, w1, g, b, w2, wv, labels, sin, cos):
    """The unsplit model in numpy (float64)."""
    rows = _rotate(x.reshape(N, SEQ, 1, HIDDEN), sin, cos).reshape(N * SEQ, HIDDEN)
    h = rows @ w1
    mu, var = h.mean(1, keepdims=True), h.var(1, keepdims=True)
    a = np.tanh((h - mu) / np.sqrt(var + 1e-5) * g + b)
    logits = (a @ w2) @ wv
    logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    return -logp[np.arange(N * SEQ), labels].mean()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("replicas", [2, 4])
def test_tensor_parallel_block_matches_the_unsplit_model(replicas, backend):
    groups = members(replicas, (1, TP))  # tensor-parallel pairs: replicas 0-1, 2-3
    rng = np.random.default_rng(replicas)
    sin, cos = trig_tables(SEQ, HIDDEN, np_dtype="float64")
    # per data-parallel group: the unsplit parameters and its own batch
    full = {k: [] for k in ("x", "w1", "g", "b", "w2", "wv", "labels")}
    for _ in range(replicas // TP):
        full["x"].append(rng.normal(size=(N, SEQ, 1, HIDDEN)))
        full["w1"].append(rng.normal(0, 0.5, (HIDDEN, FFN)))
        full["g"].append(rng.uniform(0.5, 1.5, FFN))
        full["b"].append(rng.normal(0, 0.1, FFN))
        full["w2"].append(rng.normal(0, 0.5, (FFN, HIDDEN)))
        full["wv"].append(rng.normal(0, 0.5, (HIDDEN, VOCAB)))
        full["labels"].append(rng.integers(0, VOCAB, N * SEQ))
    split_axis = {"w1": 1, "g": 0, "b": 0, "w2": 0, "wv": 1}

    def shard(name: str, r: int) -> np.ndarray:
        m = groups[r]
        value = full[name][r // TP]
        if name in split_axis:
            return np.split(value, TP, split_axis[name])[m.index(r)]
        if name == "labels":
            return (value - (VOCAB // TP) * m.index(r)).astype(np.int32)
        return value

    names = ["x", "w1", "g", "b", "w2", "wv", "labels"]
    inputs = [np.stack([shard(n, r) for r in range(replicas)]) for n in names]
    tables = [np.stack([t] * replicas) for t in (sin, cos)]

    def block(x, w1, g, b, w2, wv, labels, s, c):
        tp = xlgraph.gcg().ir.replica_grouping(1, TP)
        rows = rotary_pos_embed(x, s, c).reshape((N * SEQ, HIDDEN))
        h = replicated_all_reduce_identical_inputs(rows, group=tp) @ w1
        a = ops.tanh(layer_norm_distributed(h, g, b, group=tp))
        o = replicated_all_reduce_identical_grad_inputs(a @ w2, group=tp)
        logits = replicated_all_reduce_identical_inputs(o, group=tp) @ wv
        return [cross_entropy_sharded_loss(logits, labels, replica_grouping=tp)]

    (loss,), grads = run(replicas, block, inputs + tables,
                         lambda outs: [np.ones(replicas)], backend)
    for r in range(replicas):
        want = _full_loss(*(full[n][r // TP] for n in names), sin, cos)
        assert loss[r] == pytest.approx(want, rel=1e-12)

    params = ["x", "w1", "g", "b", "w2", "wv"]
    dirs = {n: [rng.normal(size=v.shape) for v in full[n]] for n in params}

    def objective(eps: float) -> float:  # every pair's loss once
        return sum(_full_loss(*(full[n][d] + eps * dirs[n][d] for n in params),
                              full["labels"][d], sin, cos) for d in range(replicas // TP))

    numeric = (objective(1e-6) - objective(-1e-6)) / 2e-6
    analytic = 0.0
    for k, name in enumerate(params):
        for r in range(replicas):
            m = groups[r]
            d = dirs[name][r // TP]
            if name in split_axis:
                d = np.split(d, TP, split_axis[name])[m.index(r)]
            elif m.index(r):
                continue  # x is held alike by both members: its gradient counts once
            analytic += float(np.sum(grads[k][r] * d))
    assert analytic == pytest.approx(numeric, rel=1e-6)
