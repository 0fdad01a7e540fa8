"""Benchmark: the PopTorch MNIST CNN training step in xlgraph vs PyTorch eager and JAX jit.

conv 1->32 k3, max_pool 2 (stride 2), relu, conv 32->64 k3, max_pool 2, relu, flatten (1600),
linear 1600->128, relu, dropout 0.5, linear 128->10, cross-entropy, SGD; training at batch 8
and 400 on synthetic MNIST-shaped data, all in one process. Contenders: PyTorch eager,
``torch.compile`` (its compile time excluded from the step times and reported as
``torch_compile_first_call_s``), JAX ``jit`` with donated parameters and asynchronous dispatch
(``jax``) and per-step synchronous (``jax_sync``). Prints one JSON object like ``mlp.py``
(microseconds per step, samples per second, ratios, Session creation time).

Run: ``PYTHONPATH=. python benchmarks/cnn.py [--threads 1 2] [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import calls_for, interleaved, machine  # noqa: E402
from mlp import best_setting, summary, with_threads  # noqa: E402
from models import LR, mnist_batches  # noqa: E402

import xlgraph as popxl  # noqa: E402
import xlgraph.ops as ops  # noqa: E402
from xlgraph.transforms import autodiff  # noqa: E402

Step = Callable[[int], Any]
BATCHES = (8, 400)
SHAPES = [(32, 1, 3, 3), (32,), (64, 32, 3, 3), (64,), (1600, 128), (128,), (128, 10), (10,)]


def initial_params(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    fan_in = [int(np.prod(s[1:])) if len(s) == 4 else s[0] if len(s) == 2 else 100 for s in SHAPES]
    return [(rng.normal(0, 1, s) / np.sqrt(n)).astype(np.float32) for s, n in zip(SHAPES, fan_in)]


def cnn_forward(x: popxl.Tensor, seed: popxl.Tensor, w: list[popxl.Tensor]) -> popxl.Tensor:
    """The CNN in xlgraph ops (weights OIHW as in PopXL's ``ops.conv``)."""
    def block(h: popxl.Tensor, k: popxl.Tensor, b: popxl.Tensor) -> popxl.Tensor:
        h = ops.conv(h, k) + ops.reshape(b, (1, -1, 1, 1))
        return ops.relu(ops.max_pool(h, kernel_size=(2, 2), stride=(2, 2)))

    h = block(block(x, w[0], w[1]), w[2], w[3])
    h = ops.relu(h.reshape((x.shape[0], 1600)) @ w[4] + w[5])
    return ops.dropout(h, seed, 0.5) @ w[6] + w[7]


def build_cnn(batch: int) -> tuple[popxl.Ir, Any, Any, Any, Any]:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        img_s = popxl.h2d_stream((batch, 1, 28, 28), popxl.float32, "image")
        lab_s = popxl.h2d_stream((batch,), popxl.int32, "labels")
        seed_s = popxl.h2d_stream((2,), popxl.uint32, "seed")
        params = [popxl.variable(p, popxl.float32, f"p{i}") for i, p in enumerate(initial_params())]
        x, labels, seed = (ops.host_load(s) for s in (img_s, lab_s, seed_s))

        def forward(x: popxl.Tensor, seed: popxl.Tensor, *w: popxl.Tensor) -> popxl.Tensor:
            return cnn_forward(x, seed, list(w))

        fwd = ir.create_graph(forward, x.spec, seed.spec, *[p.spec for p in params])
        site = ops.call_with_info(fwd, x, seed, *params)
        probs = ops.softmax(site.outputs[0], axis=-1)
        loss, dlogits = ops.nll_loss_with_softmax_grad(probs, labels)
        bwd = autodiff(fwd, grads_required=list(fwd.inputs[2:]))
        grads = ops.call(bwd.graph, dlogits, inputs_dict=bwd.inputs_dict(site))
        for p, g in zip(params, grads):
            ops.scaled_add_(p, g, b=-LR)
        loss_s = popxl.d2h_stream((), popxl.float32, "loss")
        ops.host_store(loss_s, loss)
    return ir, img_s, lab_s, seed_s, loss_s


def batches(batch: int, count: int = 4) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(x.reshape(batch, 1, 28, 28), y) for x, y in mnist_batches(batch, count)]


def xlgraph_step(batch: int, data: list, threads: int = 1) -> tuple[Step, Any]:
    """A Session whose conv and pooling kernels run their batch chunks on ``threads`` threads
    (BLAS then has one; with one chunk thread BLAS keeps the benchmark's setting)."""
    ir, img_s, lab_s, seed_s, _ = build_cnn(batch)
    session = popxl.Session(ir, blas_threads=None, chunk_threads=threads)
    session.wait_for_kernels()  # time the compiled kernels, if any
    session.__enter__()
    seeds = [np.array([i, 7], np.uint32) for i in range(len(data))]
    feeds = [{img_s: x, lab_s: y, seed_s: s} for (x, y), s in zip(data, seeds)]
    return (lambda i: session.run(feeds[i % len(feeds)])), session


def torch_step(batch: int, data: list, compiled: bool = False) -> tuple[Step, Any]:
    """PyTorch eager, or with ``compiled`` the forward and loss through ``torch.compile``
    (its backward compiled with it by AOTAutograd); the SGD update stays eager in both."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    p = [torch.tensor(a, requires_grad=True) for a in initial_params()]
    tdata = [(torch.from_numpy(x), torch.from_numpy(y).long()) for x, y in data]

    def loss_fn(x: Any, y: Any) -> Any:
        h = F.relu(F.max_pool2d(F.conv2d(x, p[0], p[1]), 2))
        h = F.relu(F.max_pool2d(F.conv2d(h, p[2], p[3]), 2))
        h = F.relu(h.reshape(batch, 1600) @ p[4] + p[5])
        logits = F.dropout(h, 0.5, training=True) @ p[6] + p[7]
        return F.cross_entropy(logits, y)

    loss_of = torch.compile(loss_fn, dynamic=False) if compiled else loss_fn

    def step(i: int) -> float:
        loss = loss_of(*tdata[i % len(tdata)])
        loss.backward()
        with torch.no_grad():
            for t in p:
                t -= LR * t.grad
                t.grad = None
        return loss.item()

    if compiled:  # compile now, outside the timed loops, and report how long it took
        start = time.perf_counter()
        step(0)
        COMPILE_S[f"train_b{batch}"] = round(time.perf_counter() - start, 2)
    return step, None


def torch_compile_step(batch: int, data: list) -> tuple[Step, Any]:
    return torch_step(batch, data, compiled=True)


def jax_step(batch: int, data: list, sync: bool = False) -> tuple[Step, Any]:
    """``jax.jit`` with the parameters donated and asynchronous dispatch (the timed loop waits
    once, at its end); ``sync=True`` waits for every step's loss."""
    import jax
    import jax.numpy as jnp

    def pool(h: Any) -> Any:
        return jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

    def conv(h: Any, k: Any, b: Any) -> Any:
        out = jax.lax.conv_general_dilated(h, k, (1, 1), "VALID")
        return out + b.reshape(1, -1, 1, 1)

    def loss_fn(p: list[Any], x: Any, y: Any, key: Any) -> Any:
        h = jax.nn.relu(pool(conv(x, p[0], p[1])))
        h = jax.nn.relu(pool(conv(h, p[2], p[3])))
        h = jax.nn.relu(h.reshape(batch, 1600) @ p[4] + p[5])
        keep = jax.random.bernoulli(key, 0.5, h.shape)
        logits = jnp.where(keep, h * 2.0, 0.0) @ p[6] + p[7]
        logp = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    def train_fn(p: list[Any], x: Any, y: Any, key: Any) -> tuple[list[Any], Any]:
        loss, grads = jax.value_and_grad(loss_fn)(p, x, y, key)
        return [a - LR * g for a, g in zip(p, grads)], loss

    train = jax.jit(train_fn, donate_argnums=0)
    state = {"p": [jnp.asarray(a) for a in initial_params()], "loss": None}
    jdata = [(jnp.asarray(x), jnp.asarray(y)) for x, y in data]
    keys = [jax.random.PRNGKey(i) for i in range(len(data))]

    def step(i: int) -> None:
        x, y = jdata[i % len(jdata)]
        state["p"], state["loss"] = train(state["p"], x, y, keys[i % len(keys)])
        if sync:
            state["loss"].block_until_ready()

    step.finish = lambda: jax.block_until_ready((state["p"], state["loss"]))
    return step, None


def jax_sync_step(batch: int, data: list) -> tuple[Step, Any]:
    return jax_step(batch, data, sync=True)


CONTENDERS = {"xlgraph": xlgraph_step, "torch": torch_step, "torch_compile": torch_compile_step,
              "jax": jax_step, "jax_sync": jax_sync_step}
COMPILE_S: dict[str, float] = {}  # torch.compile's first call per configuration (seconds)


def time_contenders(batch: int, quick: bool, threads: int,
                    only: list[str] | None = None) -> dict[str, dict[str, float]]:
    data = batches(batch)
    steps, sessions = {}, []
    for name, make in CONTENDERS.items():
        if only and name not in only:
            continue
        try:
            if make is xlgraph_step:
                steps[name], session = make(batch, data, threads)
            else:
                steps[name], session = make(batch, data)
        except ImportError:
            continue
        sessions.append(session)
    calls = max(2, calls_for(batch, 50_000.0 if quick else 150_000.0, per_sample_us=60.0))
    times = interleaved(steps, calls, rounds=3 if quick else 5, warmup=2)
    for session in sessions:
        if session is not None:
            session.__exit__(None, None, None)
    return times


def session_creation_ms(batch: int = 8, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        ir = build_cnn(batch)[0]
        start = time.perf_counter()
        popxl.Session(ir)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", nargs="+", choices=list(CONTENDERS),
                        help="time these contenders alone (e.g. the peers without xlgraph in "
                             "the process, to check that its threads do not slow them)")
    args = parser.parse_args()
    result: dict[str, Any] = {"benchmark": "cnn", "machine": machine(),
                              "session_create_ms": round(session_creation_ms(), 2)}
    timings = {}
    for n in args.threads:
        with with_threads(n):
            timings[n] = {f"train_b{b}": time_contenders(b, args.quick, n, args.only)
                          for b in BATCHES}
        result[f"threads_{n}"] = timings[n]
    result["best"] = {}
    for b in BATCHES:
        key = f"train_b{b}"
        result["best"][key] = summary(best_setting(timings, key, args.threads), b)
    result["torch_compile_first_call_s"] = COMPILE_S
    result["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
