"""Benchmark: how soon the MNIST tutorial trains in a fresh process, against JAX's first jit.

Each contender runs in a new process, in interleaved rounds (a shuffled order per round), first
on a clean compile cache (a fresh ``NUMBA_CACHE_DIR``), then again on the cache that run left:

- ``xlgraph``: the tutorial's training Ir (``examples/mnist/mnist.py``'s ``build_train_ir``,
  batch 8) in ``Session(ir, "ipu_model", backend="numba")`` as the example makes it: the Session
  starts on numpy's kernels and compiles numba's on its kernel thread
  (``compile_in_background=True``, the default);
- ``xlgraph_wait``: the same with ``compile_in_background=False`` (the Session compiles the
  kernels before it returns: how it was before the kernel thread);
- ``jax``: the same MLP step (``benchmarks/mlp.py``'s ``jax_functions``) under ``jax.jit``
  with the parameters donated, first call until its loss is ready.

Per contender it prints (medians over rounds, seconds unless named ``us``): ``ready_s``, from
the start of ``Session(...)`` (JAX: of the first call of the jitted step) to the first step's
result, the latency a user waits; ``import_s`` (xlgraph or JAX and the example's modules);
``kernels_s``, until the compiled kernels are in use (xlgraph); and ``steady_us``, microseconds
per step after that, the median of 5 blocks of 1000 steps (asynchronous JAX blocks once at the
end of each block); ``import_cpu_s`` and ``ready_cpu_s``, the main thread's CPU seconds in the
same spans, which other processes' load moves much less than wall time. Steps of separate
processes are not interleaved, so ``steady_us`` moves with the machine's load: ``mlp.py``
compares steady states in one process. Ratios are xlgraph's figures over the others'. One JSON
object.

Every child finds its modules' bytecode compiled, as a ``pip install`` leaves it: the children
share a bytecode cache (``PYTHONPYCACHEPREFIX``, a temporary directory) that one untimed run
per contender fills first, whatever ``PYTHONDONTWRITEBYTECODE`` says. Without it Python compiles
every module it imports from source in each process (xlgraph's 156 modules: about 0.5 s of CPU,
five times the import from bytecode); ``--no-bytecode`` times that case.

Run: ``PYTHONPATH=. python benchmarks/cold_start.py [--rounds 5]`` from the repository root.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import machine  # noqa: E402

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent / "examples" / "mnist"
STEPS = 1000  # steps per timed block (the median of 5 blocks is reported)

_XLGRAPH = """
import json, sys, time
start, start_cpu = time.perf_counter(), time.thread_time()
sys.path.insert(0, {example!r})
import numpy as np
import xlgraph
from mnist import build_train_ir, parse_args
imported, imported_cpu = time.perf_counter(), time.thread_time()
ir, (images, labels), _, _ = build_train_ir(parse_args([]))
rng = np.random.default_rng(0)
feeds = [{{images: rng.normal(size=images.shape).astype(np.float32),
          labels: rng.integers(0, 10, labels.shape).astype(np.int32)}} for _ in range(8)]
made, made_cpu = time.perf_counter(), time.thread_time()
session = xlgraph.Session(ir, "ipu_model", backend="numba", compile_in_background={background})
with session:
    session.run(feeds[0])
    first, first_cpu = time.perf_counter(), time.thread_time()
    session.wait_for_kernels()
    kernels = time.perf_counter()
    for i in range(50):
        session.run(feeds[i % 8])
    blocks = []
    for _ in range(5):
        timed = time.perf_counter()
        for i in range({steps}):
            session.run(feeds[i % 8])
        blocks.append((time.perf_counter() - timed) / {steps} * 1e6)
print(json.dumps({{"import_s": imported - start, "ready_s": first - made,
                  "import_cpu_s": imported_cpu - start_cpu, "ready_cpu_s": first_cpu - made_cpu,
                  "kernels_s": kernels - made, "steady_us": sorted(blocks)[2]}}))
"""

_JAX = """
import json, sys, time
start, start_cpu = time.perf_counter(), time.thread_time()
sys.path.insert(0, {here!r})
import numpy as np
import jax
import jax.numpy as jnp
from mlp import jax_functions
from models import initial_params
imported, imported_cpu = time.perf_counter(), time.thread_time()
_, train_fn = jax_functions()
train = jax.jit(train_fn, donate_argnums=0)
params = [jnp.asarray(p) for p in initial_params()]
rng = np.random.default_rng(0)
data = [(jnp.asarray(rng.normal(size=(8, 28, 28)).astype(np.float32)),
         jnp.asarray(rng.integers(0, 10, 8).astype(np.int32))) for _ in range(8)]
made, made_cpu = time.perf_counter(), time.thread_time()
params, loss = train(params, *data[0])
loss.block_until_ready()
first, first_cpu = time.perf_counter(), time.thread_time()
for i in range(50):
    params, loss = train(params, *data[i % 8])
jax.block_until_ready((params, loss))
blocks = []
for _ in range(5):
    timed = time.perf_counter()
    for i in range({steps}):
        params, loss = train(params, *data[i % 8])
    jax.block_until_ready((params, loss))
    blocks.append((time.perf_counter() - timed) / {steps} * 1e6)
print(json.dumps({{"import_s": imported - start, "ready_s": first - made,
                  "import_cpu_s": imported_cpu - start_cpu, "ready_cpu_s": first_cpu - made_cpu,
                  "steady_us": sorted(blocks)[2]}}))
"""

CONTENDERS = {
    "xlgraph": _XLGRAPH.format(example=str(EXAMPLE), background=True, steps=STEPS),
    "xlgraph_wait": _XLGRAPH.format(example=str(EXAMPLE), background=False, steps=STEPS),
    "jax": _JAX.format(here=str(HERE), steps=STEPS),
}


def run_child(code: str, cache: str, bytecode: str | None) -> dict[str, float]:
    """One fresh process running ``code`` with ``cache`` as numba's cache directory and
    ``bytecode`` as Python's bytecode cache (``None``: every module compiled from source)."""
    env = {**os.environ, "NUMBA_CACHE_DIR": cache,
           "PYTHONPATH": str(HERE.parent) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if bytecode is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONPYCACHEPREFIX"] = os.path.join(cache, "no-bytecode")  # finds nothing
    else:
        env["PYTHONPYCACHEPREFIX"] = bytecode
    done = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(rounds: int, names: list[str], bytecode: str | None = None,
            ) -> dict[str, dict[str, dict[str, float]]]:
    """Per contender and numba cache state (``clean``, ``cached``), the median of each figure;
    ``bytecode``: the children's bytecode cache, filled here by one untimed run per contender
    (``None``: none, every module compiled from source)."""
    runs: dict[str, dict[str, list[dict[str, float]]]] = {
        n: {"clean": [], "cached": []} for n in names}
    if bytecode is not None:
        for name in names:
            with tempfile.TemporaryDirectory() as cache:
                run_child(CONTENDERS[name], cache, bytecode)
    order = random.Random(0)
    for _ in range(rounds):
        order.shuffle(names)
        for name in names:
            with tempfile.TemporaryDirectory() as cache:
                for state in ("clean", "cached"):
                    runs[name][state].append(run_child(CONTENDERS[name], cache, bytecode))
    return {n: {state: {k: round(statistics.median(r[k] for r in rs), 4 if k != "steady_us"
                                 else 1) for k in rs[0]}
                for state, rs in by_state.items()}
            for n, by_state in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-bytecode", action="store_true",
                        help="no bytecode cache: every child compiles its modules from source")
    args = parser.parse_args()
    names = [n for n in CONTENDERS if n != "jax" or _has("jax")]
    result: dict[str, Any] = {"benchmark": "cold_start", "machine": machine(),
                              "bytecode": "none" if args.no_bytecode else "cached"}
    with tempfile.TemporaryDirectory() as bytecode:
        figures = measure(args.rounds, names, None if args.no_bytecode else bytecode)
    result["figures"] = figures
    result["ratios"] = {
        f"xlgraph/{other}": {state: {k: round(figures["xlgraph"][state][k] / v[k], 3)
                                     for k in ("ready_s", "steady_us")}
                             for state, v in figures[other].items()}
        for other in names if other != "xlgraph"}
    result["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result, indent=1))


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


if __name__ == "__main__":
    main()
