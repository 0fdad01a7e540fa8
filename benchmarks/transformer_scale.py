"""How the GPT training step (``gpt_model.py``) grows with layers, sequence and batch in xlgraph.

From a reduced base decoder (2 layers, hidden 128, 4 heads, MLP 512, vocabulary 2048, sequence
64, batch 4: small enough to run on the shared 2-core machine in about a minute), each of
layers, sequence and batch takes three values with the others at the base. Per configuration:
``step_ms`` (median of ``--steps`` steps, wall) and ``step_cpu_ms`` (the same steps in CPU
seconds of this thread: BLAS at one thread, so it is the work of the step, steadier than wall
time on a loaded machine), ``peak_mb`` (the peak of the array memory numpy reports to
``tracemalloc`` from building the Ir to the end of one step: weights, AdamW's moments, the
buffer plan and the step's temporaries) and ``params_m`` (millions of parameters). Linear
growth doubles a figure when its size doubles.

Run: ``PYTHONPATH=. python benchmarks/transformer_scale.py [--steps 5]``. Prints JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpt_model as gm  # noqa: E402
from harness import machine  # noqa: E402
from mlp import with_threads  # noqa: E402

import xlgraph as popxl  # noqa: E402

BASE = gm.Config(layers=2, hidden=128, heads=4, mlp=512, vocab=2048, seq=64, positions=128)
BASE_BATCH = 4
SWEEPS = {"layers": (1, 2, 4), "seq": (32, 64, 128), "batch": (2, 4, 8)}


def measure(cfg: gm.Config, batch: int, steps: int) -> dict[str, float]:
    """Peak array memory of building and running one step, then ``steps`` timed steps."""
    tracemalloc.start()
    ir, tok_s, loss_s, named = gm.build_train(cfg, batch)
    session = popxl.Session(ir, blas_threads=None)
    gm.load(session, named, gm.initial_weights(cfg))
    data = gm.token_batches(cfg, batch)
    with session:
        session.run({tok_s: data[0]})
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        session.wait_for_kernels()
        session.run({tok_s: data[1]})
        walls, cpus = [], []
        for i in range(steps):
            start, cpu = time.perf_counter(), time.thread_time()
            loss = session.run({tok_s: data[i % len(data)]})[loss_s]
            cpus.append(time.thread_time() - cpu)
            walls.append(time.perf_counter() - start)
    assert float(loss) == float(loss)  # a number, not NaN
    params = sum(v.nelms for v in named.values())
    return {"step_ms": round(statistics.median(walls) * 1e3, 1),
            "step_cpu_ms": round(statistics.median(cpus) * 1e3, 1),
            "peak_mb": round(peak / 2**20, 1), "params_m": round(params / 1e6, 3)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5, help="timed steps per configuration")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"benchmark": "transformer_scale", "machine": machine(),
                              "load_before": os.getloadavg(), "base": dataclasses.asdict(BASE),
                              "base_batch": BASE_BATCH}
    with with_threads(1):
        for name, values in SWEEPS.items():
            rows = result[name] = {}
            for value in values:
                cfg = BASE if name == "batch" else dataclasses.replace(BASE, **{name: value})
                rows[value] = measure(cfg, value if name == "batch" else BASE_BATCH, args.steps)
                print(name, value, rows[value], file=sys.stderr, flush=True)
    result["load_after"] = os.getloadavg()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
