"""Benchmark: the PopXL MNIST tutorial MLP in xlgraph vs hand-written numpy, PyTorch eager, JAX jit.

``xlgraph`` is the default backend (numba when installed), ``xlgraph_numpy`` the numpy one.
Training steps at batch 8 and 256, inference at batch 80, and the batch-8 training step in a
device loop of 50 steps per call (``train_b8_loop``: xlgraph's ``num_host_transfers`` loop
against a jitted ``lax.scan``), all in one process on synthetic MNIST-shaped data. JAX runs as
its users write it: ``jax.jit`` with the parameters donated and asynchronous dispatch (``jax``:
the timed loop waits once, at its end), and per-step synchronous (``jax_sync``). Prints one JSON
object: microseconds per step (median of several timed loops), samples per second, xlgraph's
ratios to every contender, and the Session creation time in a warm process (a fresh
process's first step: ``cold_start.py``). PyTorch and JAX are optional
(``pip install torch==2.13.0 jax jaxlib``).

Run: ``PYTHONPATH=. python benchmarks/mlp.py [--threads 1 2] [--quick]`` from the repository
root. Every configuration is timed once per BLAS thread count (numpy's OpenBLAS via threadpoolctl
and torch's intra-op threads; JAX keeps XLA's own pool); ``best`` takes each contender's faster
setting and gives the ratios from those.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import blas_threads, calls_for, interleaved, machine  # noqa: E402
from models import CLASSES, LR, NumpyMLP, build_mlp, initial_params, mnist_batches  # noqa: E402

import xlgraph as popxl  # noqa: E402
from xlgraph.runtime.threads import choose_threads, largest_matrix_flops  # noqa: E402

Step = Callable[[int], Any]
CONFIGS = [("train", 8), ("train", 256), ("infer", 80), ("loop", 8)]
LOOP = 50  # training steps per call in mode "loop" (``num_host_transfers``, ``lax.scan``)


def session_creation_ms(batch: int = 8, repeats: int = 9,
                        backend: str | None = None) -> dict[str, float]:
    """Median milliseconds of ``Session(ir, device)`` for the MNIST training Ir (building not
    counted) in this process, after its first Session, on ``"cpu"`` and on ``"ipu_model"``
    (which adds the tile memory model and its out-of-memory check), interleaved; and of the
    first ``session.report()``."""
    times: dict[str, list[float]] = {"cpu": [], "ipu_model": [], "report": []}
    for _ in range(repeats):
        for device in ("cpu", "ipu_model"):
            ir = build_mlp(batch).ir
            start = time.perf_counter()
            session = popxl.Session(ir, device, backend=backend)
            times[device].append((time.perf_counter() - start) * 1e3)
        start = time.perf_counter()
        session.report()
        times["report"].append((time.perf_counter() - start) * 1e3)
    return {k: round(statistics.median(v), 2) for k, v in times.items()}


def xlgraph_step(mode: str, batch: int, data: list, blas: int | str | None = None,
                 backend: str | None = None) -> tuple[Step, Any]:
    """A Session step on ``backend`` (None: the default, numba when installed); ``blas=None``
    leaves the BLAS setting of the caller in place. Mode ``loop`` runs ``LOOP`` training steps
    per ``run`` (``data`` holds stacked batches)."""
    m = build_mlp(batch, train=mode != "infer", loop=LOOP if mode == "loop" else 1)
    session = popxl.Session(m.ir, blas_threads=blas, backend=backend)
    session.wait_for_kernels()  # time the compiled kernels, not numpy's while they compile
    session.__enter__()
    if mode == "infer":
        feeds = [{m.images: x} for x, _ in data]
    else:
        feeds = [{m.images: x, m.labels: y} for x, y in data]
    step = per_steps(lambda i: session.run(feeds[i % len(feeds)]), mode)
    return step, session


def per_steps(step: Step, mode: str) -> Step:
    """Mark a device-loop step function as running ``LOOP`` training steps per call."""
    if mode == "loop":
        step.steps = LOOP  # type: ignore[attr-defined]
    return step


def numpy_step(mode: str, batch: int, data: list) -> tuple[Step, Any]:
    net = NumpyMLP(initial_params())
    if mode == "infer":
        return (lambda i: net.forward(data[i % len(data)][0])), None
    if mode == "train":
        return (lambda i: net.train_step(*data[i % len(data)])), None

    def loop(i: int) -> list[Any]:
        xs, ys = data[i % len(data)]
        return [net.train_step(x, y) for x, y in zip(xs, ys)]

    return per_steps(loop, mode), None


def torch_step(mode: str, batch: int, data: list) -> tuple[Step, Any]:
    import torch
    import torch.nn.functional as F  # noqa: N812

    if mode == "loop":
        raise NotImplementedError("torch has no device loop")
    params = [torch.tensor(p, requires_grad=mode == "train") for p in initial_params()]
    tdata = [(torch.from_numpy(x), torch.from_numpy(y).long()) for x, y in data]

    def forward(x: Any) -> Any:
        w0, b0, w1, b1 = params
        h = F.gelu(x.reshape(-1, 784) @ w0 + b0, approximate="tanh")
        return F.gelu(h @ w1 + b1, approximate="tanh")

    def train(i: int) -> float:
        x, y = tdata[i % len(tdata)]
        loss = F.cross_entropy(forward(x), y)  # = nll_loss of softmax, as in the xlgraph program
        loss.backward()
        with torch.no_grad():
            for p in params:
                p -= LR * p.grad
                p.grad = None
        return loss.item()

    def infer(i: int) -> Any:
        with torch.no_grad():
            return forward(tdata[i % len(tdata)][0]).numpy()

    return (train if mode == "train" else infer), torch


def jax_functions() -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The MLP forward pass and one SGD step (params, x, y) -> (params, loss), not jitted."""
    import jax
    import jax.numpy as jnp

    def forward(params: list[Any], x: Any) -> Any:
        w0, b0, w1, b1 = params
        h = jax.nn.gelu(x.reshape(-1, 784) @ w0 + b0, approximate=True)
        return jax.nn.gelu(h @ w1 + b1, approximate=True)

    def loss_fn(params: list[Any], x: Any, y: Any) -> Any:
        logp = jax.nn.log_softmax(forward(params, x))
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    def train(params: list[Any], x: Any, y: Any) -> tuple[list[Any], Any]:
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return [p - LR * g for p, g in zip(params, grads)], loss

    return forward, train


def jax_step(mode: str, batch: int, data: list, sync: bool = False) -> tuple[Step, Any]:
    """JAX as its users train: ``jax.jit`` with the parameters donated, asynchronous dispatch
    (the timed loop waits once, at its end); ``sync=True`` waits for every step instead. Mode
    ``loop`` jits a ``lax.scan`` over the ``LOOP`` stacked batches of one call."""
    import jax
    import jax.numpy as jnp

    forward, train_fn = jax_functions()
    if mode == "loop":
        def scanned(params: list[Any], xs: Any, ys: Any) -> tuple[list[Any], Any]:
            return jax.lax.scan(lambda p, xy: train_fn(p, *xy), params, (xs, ys))

        train = jax.jit(scanned, donate_argnums=0)
    else:
        train = jax.jit(train_fn, donate_argnums=0)
    infer = jax.jit(forward)
    state = {"params": [jnp.asarray(p) for p in initial_params()], "out": None}
    jdata = [(jnp.asarray(x), jnp.asarray(y)) for x, y in data]

    def train_step(i: int) -> None:
        state["params"], state["out"] = train(state["params"], *jdata[i % len(jdata)])
        if sync:
            state["out"].block_until_ready()

    def infer_step(i: int) -> None:
        state["out"] = infer(state["params"], jdata[i % len(jdata)][0])
        if sync:
            state["out"].block_until_ready()

    step = per_steps(infer_step if mode == "infer" else train_step, mode)
    step.finish = lambda: jax.block_until_ready((state["params"], state["out"]))
    return step, jax


def jax_sync_step(mode: str, batch: int, data: list) -> tuple[Step, Any]:
    """``jax_step`` waiting for each step's result (per-step synchronous)."""
    if mode == "loop":
        raise NotImplementedError("the scan row is asynchronous only")
    return jax_step(mode, batch, data, sync=True)


def xlgraph_numpy_step(mode: str, batch: int, data: list) -> tuple[Step, Any]:
    """xlgraph on its reference numpy backend (what ``xlgraph`` was before the numba one)."""
    return xlgraph_step(mode, batch, data, backend="numpy")


CONTENDERS = {"xlgraph": xlgraph_step, "xlgraph_numpy": xlgraph_numpy_step, "numpy": numpy_step,
              "torch": torch_step, "jax": jax_step, "jax_sync": jax_sync_step}


def config_key(mode: str, batch: int) -> str:
    """``train_b8``, ``infer_b80``; the device loop is ``train_b8_loop``."""
    return f"train_b{batch}_loop" if mode == "loop" else f"{mode}_b{batch}"


def time_contenders(mode: str, batch: int, quick: bool) -> dict[str, dict[str, float]]:
    """Median and best microseconds per step of every installed contender, timed in
    interleaved rounds under the current thread limits. Mode ``loop`` times ``LOOP`` steps per
    call (xlgraph's device loop against JAX's ``lax.scan``)."""
    data = mnist_batches(batch, 8 * (LOOP if mode == "loop" else 1))
    if mode == "loop":
        data = [(np.stack([x for x, _ in group]), np.stack([y for _, y in group]))
                for group in (data[k:k + LOOP] for k in range(0, len(data), LOOP))]
    steps, handles = {}, []
    for name, make in CONTENDERS.items():
        try:
            steps[name], handle = make(mode, batch, data)
        except (ImportError, NotImplementedError):
            continue
        handles.append(handle)
    calls = calls_for(batch, 50_000.0 if quick else 100_000.0)
    if mode == "loop":
        calls = max(2, calls // LOOP)
    times = interleaved(steps, calls, rounds=5 if quick else 15)
    for handle in handles:
        if isinstance(handle, popxl.Session):
            handle.__exit__(None, None, None)
    return times


def summary(times: dict[str, dict[str, float]], batch: int) -> dict[str, Any]:
    """Step times (median and best over rounds), samples per second and xlgraph's ratios to
    the others (from the medians)."""
    us = {k: v["median"] for k, v in times.items()}
    return {"us_per_step": us, "us_per_step_best": {k: v["min"] for k, v in times.items()},
            "samples_per_s": {k: round(batch / v * 1e6) for k, v in us.items()},
            "ratios": {f"xlgraph/{k}": round(us["xlgraph"] / v, 3)
                       for k, v in us.items() if k != "xlgraph" and "xlgraph" in us}}


def best_setting(timings: dict[int, Any], key: str, threads: list[int]) -> dict[str, Any]:
    """Per contender, its timings under the thread count with the lowest median."""
    names = timings[threads[0]][key]
    return {k: min((timings[n][key][k] for n in threads), key=lambda t: t["median"])
            for k in names}


def with_threads(n: int) -> Any:
    """Limit numpy's BLAS and torch's intra-op pool to ``n`` threads."""
    try:
        import torch

        torch.set_num_threads(n)
    except ImportError:
        pass
    return blas_threads(n)


def check_same_step(batch: int = 8) -> float:
    """xlgraph's loss after 3 steps equals the numpy twin's (to float32 rounding)."""
    data = mnist_batches(batch, 3)
    step, session = xlgraph_step("train", batch, data)
    net = NumpyMLP(initial_params())
    losses = [(float(next(iter(step(i).values()))), float(net.train_step(*data[i])))
              for i in range(3)]
    session.__exit__(None, None, None)
    return max(abs(a - b) for a, b in losses)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                        help="BLAS thread counts to time every contender with")
    parser.add_argument("--quick", action="store_true", help="shorter timing loops")
    args = parser.parse_args()
    drift = check_same_step()
    assert drift < 1e-4 * math.log(CLASSES), f"xlgraph and numpy disagree by {drift}"
    result: dict[str, Any] = {"benchmark": "mlp", "machine": machine(),
                              "session_create_ms": session_creation_ms()}
    timings: dict[int, dict[str, dict[str, float]]] = {}
    for n in args.threads:
        with with_threads(n):
            timings[n] = {config_key(mode, batch): time_contenders(mode, batch, args.quick)
                          for mode, batch in CONFIGS}
        result[f"threads_{n}"] = timings[n]
    result["best"] = {}
    for mode, batch in CONFIGS:
        key = config_key(mode, batch)
        result["best"][key] = summary(best_setting(timings, key, args.threads), batch)
        result["best"][key]["xlgraph_policy_threads"] = choose_threads(
            "auto", largest_matrix_flops(build_mlp(batch, train=mode != "infer").ir)) or "default"
    result["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
