"""The peers of ``transformer.py``: the same decoder (``gpt_model``'s weights) in PyTorch (eager
and ``torch.compile``, ``scaled_dot_product_attention``, fused ``AdamW``), in JAX (``jit`` with
the parameters and Adam state donated) and as HuggingFace's ``GPT2LMHeadModel`` for
``generate``. Each ``*_train`` returns ``step(tokens) -> loss`` (JAX's loss stays a device
array until read: asynchronous dispatch, as JAX's users run it)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from gpt_model import BETAS, EPS, LR, WEIGHT_DECAY, Config, causal_mask

Step = Any


def torch_model(cfg: Config, weights: dict[str, np.ndarray]) -> Any:
    """A ``torch.nn.Module`` holding ``weights`` whose ``forward(tokens)`` is the loss."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    h, nh, hd = cfg.hidden, cfg.heads, cfg.head_dim

    class Decoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.names = list(weights)  # parameter names cannot hold "."
            self.params = torch.nn.ParameterList(torch.nn.Parameter(torch.tensor(v))
                                                 for v in weights.values())

        def forward(self, tokens: Any) -> Any:
            p = dict(zip(self.names, self.params))
            ids, labels = tokens[:, :-1], tokens[:, 1:]
            b, s = ids.shape
            x = p["wte"][ids] + p["wpe"][:s]
            for i in range(cfg.layers):
                w = {k[len(f"layer{i}."):]: v for k, v in p.items()
                     if k.startswith(f"layer{i}.")}
                a = F.layer_norm(x, (h,), w["ln1.weight"], w["ln1.bias"])
                q, k, v = ((a @ w[f"attn.{n}.weight"] + w[f"attn.{n}.bias"]).view(b, s, nh, hd)
                           .transpose(1, 2) for n in "qkv")
                ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                ctx = ctx.transpose(1, 2).reshape(b, s, h)
                x = x + ctx @ w["attn.proj.weight"] + w["attn.proj.bias"]
                a = F.layer_norm(x, (h,), w["ln2.weight"], w["ln2.bias"])
                a = F.gelu(a @ w["fc.weight"] + w["fc.bias"], approximate="tanh")
                x = x + a @ w["out.weight"] + w["out.bias"]
            x = F.layer_norm(x, (h,), p["lnf.weight"], p["lnf.bias"])
            logits = x @ p["wte"].t()
            return F.cross_entropy(logits.reshape(b * s, -1).float(), labels.reshape(-1))

    return Decoder()


def torch_train(cfg: Config, weights: dict[str, np.ndarray], compiled: bool = False,
                half: bool = False, half_dtype: str = "bfloat16", ddp: bool = False) -> Step:
    """PyTorch: the forward and loss (eager, or through ``torch.compile``; with ``half``
    under autocast to ``half_dtype``), backward, ``AdamW(fused=True)``. ``ddp``: the model in
    ``DistributedDataParallel`` over the process group the caller has started."""
    import torch

    model = torch_model(cfg, weights)
    forward = model
    if ddp:
        forward = torch.nn.parallel.DistributedDataParallel(model)
    elif compiled:
        forward = torch.compile(model, dynamic=False)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS,
                            weight_decay=WEIGHT_DECAY, fused=True)

    def step(tokens: np.ndarray) -> float:
        t = torch.from_numpy(tokens).long()
        if half:
            with torch.autocast("cpu", dtype=getattr(torch, half_dtype)):
                loss = forward(t)
        else:
            loss = forward(t)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    step.model = model
    return step


def jax_train(cfg: Config, weights: dict[str, np.ndarray], half: bool = False) -> Step:
    """JAX: ``jit`` of the whole step (loss, ``value_and_grad``, AdamW) with the parameters
    and Adam's moments donated; ``half`` computes the forward in bfloat16 from float32
    parameters."""
    import jax
    import jax.numpy as jnp

    h, nh, hd = cfg.hidden, cfg.heads, cfg.head_dim
    mask = jnp.asarray(causal_mask(cfg.seq))
    cdt = jnp.bfloat16 if half else jnp.float32

    def layer_norm(x: Any, w: Any, b: Any) -> Any:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + 1e-5) * w + b

    def loss_fn(p: dict[str, Any], tokens: Any) -> Any:
        p = {k: v.astype(cdt) for k, v in p.items()}
        ids, labels = tokens[:, :-1], tokens[:, 1:]
        b, s = ids.shape
        x = p["wte"][ids] + p["wpe"][:s]
        for i in range(cfg.layers):
            w = {k[len(f"layer{i}."):]: v for k, v in p.items() if k.startswith(f"layer{i}.")}
            a = layer_norm(x, w["ln1.weight"], w["ln1.bias"])
            q, k, v = ((a @ w[f"attn.{n}.weight"] + w[f"attn.{n}.bias"]).reshape(b, s, nh, hd)
                       .transpose(0, 2, 1, 3) for n in "qkv")
            scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd) + mask.astype(cdt)
            ctx = jax.nn.softmax(scores, axis=-1) @ v
            x = x + ctx.transpose(0, 2, 1, 3).reshape(b, s, h) @ w["attn.proj.weight"] \
                + w["attn.proj.bias"]
            a = layer_norm(x, w["ln2.weight"], w["ln2.bias"])
            a = jax.nn.gelu(a @ w["fc.weight"] + w["fc.bias"], approximate=True)
            x = x + a @ w["out.weight"] + w["out.bias"]
        x = layer_norm(x, p["lnf.weight"], p["lnf.bias"])
        logp = jax.nn.log_softmax((x @ p["wte"].T).astype(jnp.float32))
        return -jnp.mean(jnp.take_along_axis(logp, labels[..., None], axis=-1))

    def train_fn(state: tuple, tokens: Any) -> tuple[tuple, Any]:
        p, m, v, t = state
        loss, g = jax.value_and_grad(loss_fn)(p, tokens)
        t = t + 1
        m = jax.tree_util.tree_map(lambda m, g: BETAS[0] * m + (1 - BETAS[0]) * g, m, g)
        v = jax.tree_util.tree_map(lambda v, g: BETAS[1] * v + (1 - BETAS[1]) * g * g, v, g)
        c1, c2 = 1 - BETAS[0] ** t, 1 - BETAS[1] ** t
        p = jax.tree_util.tree_map(
            lambda p, m, v: p - LR * (m / c1 / (jnp.sqrt(v / c2) + EPS) + WEIGHT_DECAY * p),
            p, m, v)
        return (p, m, v, t), loss

    train = jax.jit(train_fn, donate_argnums=0)
    zeros = {k: jnp.zeros_like(v) for k, v in weights.items()}
    state = {"s": ({k: jnp.asarray(v) for k, v in weights.items()}, zeros,
                   {k: jnp.zeros_like(v) for k, v in weights.items()}, jnp.float32(0)),
             "loss": None}

    def step(tokens: np.ndarray) -> Any:
        state["s"], state["loss"] = train(state["s"], tokens)
        return state["loss"]

    step.finish = lambda: jax.block_until_ready((state["s"], state["loss"]))
    return step


def hf_model(cfg: Config, weights: dict[str, np.ndarray]) -> Any:
    """HuggingFace's ``GPT2LMHeadModel`` holding ``weights`` (q, k and v joined into
    ``c_attn``; GPT-2's ``Conv1D`` keeps weights as ``(in, out)``, as ``Linear`` does)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    conf = GPT2Config(vocab_size=cfg.vocab, n_positions=cfg.positions, n_embd=cfg.hidden,
                      n_layer=cfg.layers, n_head=cfg.heads, n_inner=cfg.mlp,
                      activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                      attn_pdrop=0.0, layer_norm_epsilon=1e-5, bos_token_id=None,
                      eos_token_id=None, tie_word_embeddings=True)
    model = GPT2LMHeadModel(conf).eval()
    sd = {"transformer.wte.weight": weights["wte"], "transformer.wpe.weight": weights["wpe"],
          "transformer.ln_f.weight": weights["lnf.weight"],
          "transformer.ln_f.bias": weights["lnf.bias"]}
    for i in range(cfg.layers):
        src, dst = f"layer{i}.", f"transformer.h.{i}."
        for part in ("weight", "bias"):
            sd[dst + "attn.c_attn." + part] = np.concatenate(
                [weights[f"{src}attn.{n}.{part}"] for n in "qkv"], axis=-1)
            for a, b in (("ln1", "ln_1"), ("ln2", "ln_2"), ("attn.proj", "attn.c_proj"),
                         ("fc", "mlp.c_fc"), ("out", "mlp.c_proj")):
                sd[dst + b + "." + part] = weights[f"{src}{a}.{part}"]
    missing, _ = model.load_state_dict({k: torch.tensor(v) for k, v in sd.items()}, strict=False)
    left = [k for k in missing if not k.endswith(("attn.bias", "attn.masked_bias"))
            and k != "lm_head.weight"]
    if left:
        raise KeyError(f"hf_model: weights not set: {left}")
    model.tie_weights()
    return model


def hf_generate(cfg: Config, weights: dict[str, np.ndarray], new: int) -> Any:
    """``generate(prompt) -> tokens``: greedy ``GPT2LMHeadModel.generate`` with its KV cache."""
    import torch

    model = hf_model(cfg, weights)

    def generate(prompt: np.ndarray) -> np.ndarray:
        ids = torch.from_numpy(prompt).long()
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 num_beams=1, max_length=ids.shape[1] + new, pad_token_id=0,
                                 use_cache=True)
        return out.numpy()

    return generate
