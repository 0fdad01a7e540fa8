"""The GPT-style decoder of ``transformer.py``, its weights, and its xlgraph programs.

Pre-LayerNorm blocks (causal self-attention, then a GELU MLP), learnt positions, a final
LayerNorm and a language-model head tied to the token embedding: GPT-2's layout, so that
HuggingFace's ``GPT2LMHeadModel`` holds the same weights. The xlgraph training step is written
with popxl-addons ``Module``s (``Linear``, ``LayerNorm``), ``addons.autodiff`` and one
``AdamOptimizerStep`` per variable, as the PopXL applications write it; the decode step of
generation (``gpt_generate.py``) is one token per ``Session.run`` with the keys and values of
earlier tokens kept in variables (``dynamic_update_`` at the token's position).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np

import xlgraph as popxl
import xlgraph.addons as addons
from xlgraph import ops
from xlgraph.addons.layers import LayerNorm, Linear
from xlgraph.addons.optimizers import AdamOptimizerStep

MASKED = -30000.0  # added to the scores of future positions: exp gives 0 in float16 and 32
LR, BETAS, EPS, WEIGHT_DECAY, LOSS_SCALE = 1e-3, (0.9, 0.999), 1e-8, 0.01, 1024.0


@dataclass(frozen=True)
class Config:
    """The decoder's sizes."""

    layers: int = 4
    hidden: int = 256
    heads: int = 4
    mlp: int = 1024
    vocab: int = 8192
    seq: int = 128
    positions: int = 256  # learnt position rows: prompt + generated tokens fit

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


FULL = Config()
SMALL = Config(layers=12, hidden=768, heads=12, mlp=3072, vocab=50257, positions=1024)  # GPT-2
TINY = Config(layers=2, hidden=32, heads=2, mlp=64, vocab=64, seq=8, positions=48)
SIZES = {"round5": FULL, "small": SMALL}


def sized(size: str, layers: int | None = None) -> Config:
    """The decoder of ``SIZES[size]``, with ``layers`` layers if given (shorter profiles)."""
    cfg = SIZES[size]
    return cfg if layers is None else replace(cfg, layers=layers)


def initial_weights(cfg: Config, seed: int = 0) -> dict[str, np.ndarray]:
    """float32 weights by their addons name: normal(0, 0.02) matrices, zero biases, unit
    LayerNorm scales."""
    rng = np.random.default_rng(seed)
    h, m = cfg.hidden, cfg.mlp

    def normal(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    w = {"wte": normal(cfg.vocab, h), "wpe": normal(cfg.positions, h)}
    for i in range(cfg.layers):
        p = f"layer{i}."
        for ln in ("ln1", "ln2"):
            w[p + ln + ".weight"] = np.ones(h, np.float32)
            w[p + ln + ".bias"] = np.zeros(h, np.float32)
        for name, (n_in, n_out) in {"attn.q": (h, h), "attn.k": (h, h), "attn.v": (h, h),
                                    "attn.proj": (h, h), "fc": (h, m), "out": (m, h)}.items():
            w[p + name + ".weight"] = normal(n_in, n_out)
            w[p + name + ".bias"] = np.zeros(n_out, np.float32)
    w["lnf.weight"], w["lnf.bias"] = np.ones(h, np.float32), np.zeros(h, np.float32)
    return w


def token_batches(cfg: Config, batch: int, count: int = 4, seed: int = 1) -> list[np.ndarray]:
    """``count`` int32 arrays ``(batch, seq + 1)``: inputs are ``[:, :-1]``, labels ``[:, 1:]``."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, cfg.vocab, (batch, cfg.seq + 1)).astype(np.int32)
            for _ in range(count)]


def causal_mask(n: int) -> np.ndarray:
    return np.triu(np.full((n, n), MASKED, np.float32), 1)


class Attention(addons.Module):
    """Causal multi-head self-attention of ``(batch * seq, hidden)`` rows."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.q, self.k, self.v, self.proj = (Linear(cfg.hidden) for _ in range(4))

    def build(self, x: popxl.Tensor, mask: popxl.Tensor) -> popxl.Tensor:
        cfg = self.cfg
        batch = x.shape[0] // cfg.seq
        heads = (batch, cfg.seq, cfg.heads, cfg.head_dim)
        q = ops.transpose(self.q(x).reshape(heads), (0, 2, 1, 3))
        k = ops.transpose(self.k(x).reshape(heads), (0, 2, 3, 1))
        v = ops.transpose(self.v(x).reshape(heads), (0, 2, 1, 3))
        scores = (q @ k) * (1.0 / math.sqrt(cfg.head_dim)) + mask
        ctx = ops.softmax(scores, axis=-1) @ v
        return self.proj(ops.transpose(ctx, (0, 2, 1, 3)).reshape(x.shape))


class Block(addons.Module):
    """``x + attn(ln1(x))``, then ``+ out(gelu(fc(ln2(.))))``."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.ln1, self.ln2 = LayerNorm(), LayerNorm()
        self.attn = Attention(cfg)
        self.fc, self.out = Linear(cfg.mlp), Linear(cfg.hidden)

    def build(self, x: popxl.Tensor, mask: popxl.Tensor) -> popxl.Tensor:
        x = x + self.attn(self.ln1(x), mask)
        return x + self.out(ops.gelu(self.fc(self.ln2(x))))


class GPT(addons.Module):
    """Token ids ``(batch, seq)`` to logits ``(batch * seq, vocab)`` in ``dtype``."""

    def __init__(self, cfg: Config, dtype: popxl.dtype = popxl.float32) -> None:
        super().__init__()
        self.cfg, self.dtype = cfg, dtype
        for i in range(cfg.layers):
            setattr(self, f"layer{i}", Block(cfg))
        self.lnf = LayerNorm()

    def build(self, ids: popxl.Tensor) -> popxl.Tensor:
        cfg = self.cfg
        wte = self.add_variable_input("wte", partial(np.zeros, (cfg.vocab, cfg.hidden)), self.dtype)
        wpe = self.add_variable_input("wpe", partial(np.zeros, (cfg.positions, cfg.hidden)),
                                      self.dtype)
        rows = ids.shape[0] * cfg.seq
        x = ops.gather(wte, ids.reshape((rows,)))
        x = (x.reshape((ids.shape[0], cfg.seq, cfg.hidden))
             + wpe[:cfg.seq].reshape((1, cfg.seq, cfg.hidden))).reshape((rows, cfg.hidden))
        mask = popxl.constant(causal_mask(cfg.seq), self.dtype)
        for i in range(cfg.layers):
            x = getattr(self, f"layer{i}")(x, mask)
        return self.lnf(x) @ ops.transpose(wte)


def build_train(cfg: Config, batch: int, half: bool = False, replicas: int | str = 1,
                first_order: popxl.dtype = popxl.float32) -> tuple[popxl.Ir, Any, Any, Any]:
    """The training step: forward, cross-entropy, backward, AdamW on every weight. ``half``:
    weights, activations and the loss in float16 (its stream float32), Adam's second moment in
    float32, the loss scaled by ``LOSS_SCALE`` (the gradient divided by it again inside Adam);
    Adam's first moment in ``first_order``. ``replicas`` (a number, or ``"popdist"`` in an
    ``xlgraph-run`` job): data-parallel replicas of ``batch`` each, every gradient averaged over
    them (``replicated_all_reduce``) before its update. Returns ``(ir, tokens stream, loss
    stream, {name: variable})``."""
    dtype = popxl.float16 if half else popxl.float32
    scale = LOSS_SCALE if half else 1.0
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph, popxl.in_sequence():
        tok_s = popxl.h2d_stream((batch, cfg.seq + 1), popxl.int32, "tokens")
        tokens = ops.host_load(tok_s)
        ids, labels = tokens[:, :cfg.seq], tokens[:, 1:]
        facts, fwd = GPT(cfg, dtype).create_graph(ids)
        bwd = addons.autodiff(fwd)
        variables = facts.init()
        info = fwd.bind(variables).call_with_info(ids)
        loss, dlogits = addons.ops.cross_entropy_with_grad(
            info.outputs[0], labels.reshape((batch * cfg.seq,)), loss_scaling=scale)
        bwd_info = bwd.call_with_info(dlogits, args=bwd.grad_graph_info.inputs_dict(info))
        grads = bwd.grad_graph_info.fwd_parent_ins_to_grad_parent_outs(info, bwd_info)
        if ir.replication_factor > 1:
            grads = {v: ops.collectives.replicated_all_reduce(grads[v], "mean")
                     for v in variables.tensors}
        for var in variables.tensors:
            opt_facts, opt = AdamOptimizerStep(cache=True).create_graph(
                var, grads[var].spec, lr=LR, beta1=BETAS[0], beta2=BETAS[1], eps=EPS,
                weight_decay=WEIGHT_DECAY, first_order_dtype=first_order, loss_scaling=scale)
            opt.bind(opt_facts.init()).call(var, grads[var])
        loss_s = popxl.d2h_stream((), popxl.float32, "loss")  # the logits' dtype, widened
        ops.host_store(loss_s, loss if loss.dtype == popxl.float32 else ops.cast(
            loss, popxl.float32))
    return ir, tok_s, loss_s, dict(variables.named_tensors.items())


def load(session: popxl.Session, named: dict[str, Any], weights: dict[str, np.ndarray]) -> None:
    """Write ``weights`` into the Session's variables of the same names (cast to their dtype)."""
    session.write_variables_data({var: weights[name].astype(var.dtype.as_numpy())
                                  for name, var in named.items()})


def build_decode(cfg: Config, batch: int, total: int) -> tuple[popxl.Ir, Any, Any, Any, dict]:
    """One generated token: ids ``(batch,)`` at position ``pos`` in, the greedy next ids out;
    every layer's keys and values are variables ``(batch, heads, total, head_dim)`` written at
    ``pos``, and attention reads positions ``<= pos``. Returns ``(ir, ids stream, pos stream,
    next-ids stream, {name: weight variable})``."""
    h, nh, hd = cfg.hidden, cfg.heads, cfg.head_dim
    zeros = initial_weights(cfg)
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        w = {name: popxl.variable(np.zeros_like(a), popxl.float32, name)
             for name, a in zeros.items()}
        ids_s = popxl.h2d_stream((batch,), popxl.int32, "ids")
        pos_s = popxl.h2d_stream((1,), popxl.int32, "pos")
        ids, pos = ops.host_load(ids_s), ops.host_load(pos_s)
        x = ops.gather(w["wte"], ids) + ops.dynamic_slice(w["wpe"], pos, [0], [1], True)
        later = ops.greater(popxl.constant(np.arange(total, dtype=np.int32)), pos)
        mask = ops.cast(later, popxl.float32) * MASKED
        for i in range(cfg.layers):
            p = f"layer{i}."

            def lin(name: str, t: popxl.Tensor, p: str = p) -> popxl.Tensor:
                return t @ w[p + name + ".weight"] + w[p + name + ".bias"]

            def ln(name: str, t: popxl.Tensor, p: str = p) -> popxl.Tensor:
                return ops.layer_norm(t, w[p + name + ".weight"], w[p + name + ".bias"])

            a = ln("ln1", x)
            q = lin("attn.q", a).reshape((batch, nh, 1, hd))
            for name in ("k", "v"):
                cache = popxl.variable(np.zeros((batch, nh, total, hd), np.float32),
                                       name=p + name + "_cache")
                new = lin("attn." + name, a).reshape((batch, nh, 1, hd))
                ops.dynamic_update_(cache, pos, new, [2], [1], True)
                if name == "k":
                    scores = (q @ ops.transpose(cache, (0, 1, 3, 2))) * (1.0 / math.sqrt(hd)) + mask
                    probs = ops.softmax(scores, axis=-1)
                else:
                    x = x + lin("attn.proj", (probs @ cache).reshape((batch, h)))
            x = x + lin("out", ops.gelu(lin("fc", ln("ln2", x))))
        x = ops.layer_norm(x, w["lnf.weight"], w["lnf.bias"])
        nxt = ops.argmax(x @ ops.transpose(w["wte"]), dim=1)
        next_s = popxl.d2h_stream(nxt.shape, nxt.dtype, "next")
        ops.host_store(next_s, nxt)
    return ir, ids_s, pos_s, next_s, w

