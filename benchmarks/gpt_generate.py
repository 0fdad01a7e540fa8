"""Greedy generation with ``gpt_model``'s decoder in xlgraph: the prompt in one run, then one
run per new token.

At batch 1 a decode step reads every weight once for a few flops a weight, so a run's time is
the time to stream the weights (GPT-2 small: 495 MB a run). HuggingFace's ``generate`` reads
the prompt in one forward pass; reading it a token a run cost xlgraph ``prompt - 1`` more
passes over the weights (7 of 135 for an 8-token prompt). ``build_prefill`` is that forward
pass: the prompt's rows at once (matrix products that read each weight once), its keys and
values out for the decode step's caches, and the greedy token after the prompt.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from gpt_model import Config, build_decode, causal_mask, initial_weights, load

import xlgraph as popxl
from xlgraph import ops


def build_prefill(cfg: Config, batch: int, prompt_len: int) -> tuple[popxl.Ir, Any, Any, dict,
                                                                     dict]:
    """The prompt ``(batch, prompt_len)`` in one run: out the greedy next ids ``(batch,)`` and
    each layer's keys and values ``(batch, heads, prompt_len, head_dim)`` (streams named as the
    decode step's cache variables). Returns ``(ir, ids stream, next-ids stream, {cache name:
    stream}, {name: weight variable})``."""
    h, nh, hd, n = cfg.hidden, cfg.heads, cfg.head_dim, prompt_len
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        w = {name: popxl.variable(np.zeros_like(a), popxl.float32, name)
             for name, a in initial_weights(cfg).items()}
        ids_s = popxl.h2d_stream((batch, n), popxl.int32, "ids")
        ids = ops.host_load(ids_s).reshape((batch * n,))
        x = (ops.gather(w["wte"], ids).reshape((batch, n, h))
             + w["wpe"][:n].reshape((1, n, h))).reshape((batch * n, h))
        mask = popxl.constant(causal_mask(n))
        caches: dict[str, Any] = {}
        for i in range(cfg.layers):
            p = f"layer{i}."

            def affine(name: str, t: popxl.Tensor, norm: bool = False,
                       p: str = p) -> popxl.Tensor:
                weight, bias = w[p + name + ".weight"], w[p + name + ".bias"]
                return ops.layer_norm(t, weight, bias) if norm else t @ weight + bias

            a = affine("ln1", x, norm=True)
            q, k, v = (ops.transpose(affine("attn." + c, a).reshape((batch, n, nh, hd)),
                                     (0, 2, 1, 3)) for c in "qkv")
            for name, t in (("k", k), ("v", v)):
                caches[p + name + "_cache"] = stream = popxl.d2h_stream(
                    t.shape, t.dtype, p + name)
                ops.host_store(stream, t)
            scores = (q @ ops.transpose(k, (0, 1, 3, 2))) * (1.0 / math.sqrt(hd)) + mask
            ctx = ops.transpose(ops.softmax(scores, axis=-1) @ v, (0, 2, 1, 3))
            x = x + affine("attn.proj", ctx.reshape((batch * n, h)))
            x = x + affine("out", ops.gelu(affine("fc", affine("ln2", x, norm=True))))
        last = x.reshape((batch, n, h))[:, n - 1:n].reshape((batch, h))
        last = ops.layer_norm(last, w["lnf.weight"], w["lnf.bias"])
        nxt = ops.argmax(last @ ops.transpose(w["wte"]), dim=1)
        next_s = popxl.d2h_stream(nxt.shape, nxt.dtype, "next")
        ops.host_store(next_s, nxt)
    return ir, ids_s, next_s, caches, w


class Generator:
    """``generator(prompt (batch, prompt_len)) -> (batch, prompt_len + new)`` over two open
    Sessions on the same weights: the prefill (``build_prefill``), whose keys and values are
    written into the decode step's caches (``build_decode``), then one decode run per new
    token after the first."""

    def __init__(self, cfg: Config, weights: dict[str, np.ndarray], batch: int,
                 prompt_len: int, new: int, **session_kw: Any) -> None:
        self.batch, self.prompt_len, self.new = batch, prompt_len, new
        total = prompt_len + new
        pre_ir, self._pre_ids, self._pre_next, self._kv, pre_named = build_prefill(
            cfg, batch, prompt_len)
        ir, self._ids, self._pos, self._next, named = build_decode(cfg, batch, total)
        self.prefill, self.decode = popxl.Session(pre_ir, **session_kw), popxl.Session(
            ir, **session_kw)
        load(self.prefill, pre_named, weights)
        load(self.decode, named, weights)
        by_name = {v.name: v for v in ir.main_graph.variables}
        self._caches = {by_name[name]: np.zeros((batch, cfg.heads, total, cfg.head_dim),
                                                np.float32) for name in self._kv}
        self._positions = [np.array([i], np.int32) for i in range(total)]
        self.__enter__()

    def __enter__(self) -> Generator:
        self.prefill.__enter__()
        self.decode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.decode.__exit__(*exc)
        finally:
            self.prefill.__exit__(*exc)

    def wait_for_kernels(self) -> None:
        self.prefill.wait_for_kernels()
        self.decode.wait_for_kernels()

    def __call__(self, prompt: np.ndarray) -> np.ndarray:
        n = self.prompt_len
        out = np.empty((self.batch, n + self.new), np.int32)
        out[:, :n] = prompt
        found = self.prefill.run({self._pre_ids: out[:, :n]})
        for var, cache in self._caches.items():
            cache[:, :, :n] = found[self._kv[var.name]]
        self.decode.write_variables_data(self._caches)
        out[:, n] = found[self._pre_next]
        for i in range(n, n + self.new - 1):
            out[:, i + 1] = self.decode.run({self._ids: out[:, i], self._pos: self._positions[i]})[
                self._next]
        return out
