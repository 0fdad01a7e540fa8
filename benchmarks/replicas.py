"""Replicas: N in-process replicas of batch b against one replica of batch N*b (MLP and CNN,
N = 2, 4, 8, on the numpy and the numba backend), and 2 instances x 1 replica (xlgraph-run,
MPI) against 1 instance x 2 replicas.

Prints JSON. In-process contenders are timed in interleaved rounds in one process; the
instance comparison runs each layout as its own job, alternating, and reports per-sample
times measured by instance 0. Run ``python benchmarks/replicas.py [--quick] [--no-instances |
--instances-only] [--backend numpy|numba]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from harness import interleaved, machine

import xlgraph
from xlgraph import dist, ops
from xlgraph.ops.collectives import replicated_all_reduce
from xlgraph.transforms import grad_of_call

LR = 0.01


def _mlp(x, labels, w0, w1):
    h = ops.gelu(x.reshape((x.shape[0], 784)) @ w0)
    return ops.nll_loss(ops.softmax(h @ w1, axis=-1), labels)


def _cnn(x, labels, k, w):
    h = ops.relu(ops.conv(x, k, padding=(1, 1, 1, 1)))
    h = ops.max_pool(h, (2, 2), (2, 2))
    return ops.nll_loss(ops.softmax(h.reshape((x.shape[0], -1)) @ w, axis=-1), labels)


MODELS = {
    "mlp": (_mlp, (1, 28, 28), [(784, 128), (128, 10)]),
    "cnn": (_cnn, (1, 28, 28), [(8, 1, 3, 3), (8 * 14 * 14, 10)]),
}


def build(model: str, replicas: int | str, batch: int,
          backend: str | None = None) -> tuple[xlgraph.Session, Any, Any]:
    """A training step (SGD, gradients averaged over replicas) and its streams."""
    fn, item, shapes = MODELS[model]
    ir = xlgraph.Ir(replication=replicas)
    rng = np.random.default_rng(0)
    with ir.main_graph, xlgraph.in_sequence():
        params = [xlgraph.variable(rng.normal(0, 0.05, s).astype(np.float32), name=f"p{i}")
                  for i, s in enumerate(shapes)]
        s_x = xlgraph.h2d_stream((batch, *item), xlgraph.float32, "x")
        s_y = xlgraph.h2d_stream((batch,), xlgraph.int32, "y")
        graph = ir.create_graph(fn, s_x.spec, s_y.spec, *(p.spec for p in params))
        site = ops.call_with_info(graph, ops.host_load(s_x), ops.host_load(s_y), *params)
        grads = grad_of_call(site, wrt=params)
        for p in params:
            g = replicated_all_reduce(grads[p], "mean") if ir.replication_factor > 1 else grads[p]
            ops.scaled_add_(p, g, b=-LR)
    return xlgraph.Session(ir, backend=backend, compile_in_background=False), s_x, s_y


def _data(replicas: int, batch: int, item: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    lead = (replicas,) if replicas > 1 else ()
    return (rng.normal(size=(*lead, batch, *item)).astype(np.float32),
            rng.integers(0, 10, (*lead, batch)).astype(np.int32))


def step_fn(model: str, replicas: int, batch: int, backend: str) -> Any:
    session, s_x, s_y = build(model, replicas, batch, backend)
    x, y = _data(replicas, batch, MODELS[model][1])
    session.__enter__()
    feed = {s_x: x, s_y: y}
    return lambda i: session.run(feed)


CONFIGS = [("mlp", 2, 16), ("mlp", 4, 16), ("mlp", 8, 16), ("mlp", 2, 128), ("cnn", 2, 8),
           ("cnn", 4, 8), ("cnn", 8, 8), ("cnn", 2, 32)]


def in_process(quick: bool, backends: list[str]) -> dict[str, Any]:
    out = {}
    for backend in backends:
        for model, n, b in CONFIGS:
            calls = 5 if quick else (40 if model == "mlp" else 10)
            times = interleaved({"replicas": step_fn(model, n, b, backend),
                                 "single": step_fn(model, 1, n * b, backend)},
                                calls, rounds=3 if quick else 7)
            out[f"{backend} {model} {n}x{b} vs 1x{n * b}"] = {
                **times, **{f"ratio_{k}": round(times["replicas"][k] / times["single"][k], 3)
                            for k in ("median", "min")}}
    return out


def instance_job(batch: int, steps: int) -> None:
    """Run inside an instance (or alone with 2 replicas): per-sample microseconds."""
    replicas = "popdist" if dist.isPopdistEnvSet() else 2
    session, s_x, s_y = build("mlp", replicas, batch)
    local = session.ir.instance_replication_factor
    x, y = _data(local, batch, MODELS["mlp"][1])
    with session:
        for _ in range(3):
            session.run({s_x: x, s_y: y})
        start = time.perf_counter()
        for _ in range(steps):
            session.run({s_x: x, s_y: y})
        elapsed = time.perf_counter() - start
    if session.ir.instance_index == 0:
        print(json.dumps({"us_per_sample": round(elapsed / steps / (2 * batch) * 1e6, 3)}))


def instances(quick: bool, batch: int = 128) -> dict[str, Any]:
    here = Path(__file__).resolve()
    steps = "20" if quick else "100"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(here.parent.parent),
                                                        os.environ.get("PYTHONPATH", "")]))
    jobs = {
        "1 instance x 2 replicas": [sys.executable, str(here), "--instance-job", str(batch),
                                    steps],
        "2 instances x 1 replica": [sys.executable, "-m", "xlgraph.dist.run", "--num-instances",
                                    "2", "--num-replicas", "2", sys.executable, str(here),
                                    "--instance-job", str(batch), steps],
    }
    runs: dict[str, list[float]] = {k: [] for k in jobs}
    for _ in range(2 if quick else 3):
        for name, cmd in jobs.items():
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            runs[name].append(json.loads(done.stdout.strip().splitlines()[-1])["us_per_sample"])
    result = {name: {"us_per_sample": v, "median": float(np.median(v))} for name, v in runs.items()}
    result["global_batch"] = 2 * batch
    result["ratio_2_instances_over_1"] = round(
        result["2 instances x 1 replica"]["median"] / result["1 instance x 2 replicas"]["median"],
        3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter timing loops")
    parser.add_argument("--no-instances", action="store_true",
                        help="skip the MPI instance comparison")
    parser.add_argument("--instances-only", action="store_true",
                        help="only the MPI instance comparison")
    parser.add_argument("--backend", choices=("numpy", "numba"), action="append",
                        help="backend(s) to time (default: both)")
    parser.add_argument("--instance-job", nargs=2, type=int, metavar=("BATCH", "STEPS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.instance_job:
        instance_job(*args.instance_job)
        return
    backends = args.backend or ["numpy", "numba"]
    result: dict[str, Any] = {"benchmark": "replicas", "machine": machine(),
                              "load_avg_1m_before": round(os.getloadavg()[0], 2)}
    if not args.instances_only:
        result["in_process"] = in_process(args.quick, backends)
    if not args.no_instances:
        result["instances"] = instances(args.quick)
    result["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
