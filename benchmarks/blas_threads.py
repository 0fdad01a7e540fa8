"""Measure the MNIST training step with 1 and 2 BLAS threads, idle and with one core loaded.

For batch 8, 80 and 256, times the xlgraph Session and the hand-written numpy step under
``threadpoolctl`` limits of 1 and 2 threads, first on the machine as it is, then while a second
process spins on one core. Prints one JSON object (microseconds per step, medians). This is the
evidence for the thread policy in ``xlgraph/runtime/threads.py`` (see ``README.md``).

Run: ``PYTHONPATH=. python benchmarks/blas_threads.py`` (needs ``threadpoolctl``; ``--help``
lists the flags).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import blas_threads, calls_for, machine, time_per_call  # noqa: E402
from mlp import numpy_step, xlgraph_step  # noqa: E402
from models import mnist_batches  # noqa: E402

BATCHES = (8, 80, 256)


def measure(batches: tuple[int, ...], thread_counts: tuple[int, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for batch in batches:
        data = mnist_batches(batch, 8)
        calls = calls_for(batch, 150_000.0)
        row: dict[str, float] = {}
        for name, make in (("xlgraph", xlgraph_step), ("numpy", numpy_step)):
            for threads in thread_counts:
                with blas_threads(threads):
                    step, session = make("train", batch, data)  # xlgraph: no policy of its own
                    row[f"{name}_{threads}t"] = round(time_per_call(step, calls, repeats=5), 1)
                if session is not None:
                    session.__exit__(None, None, None)
        out[f"train_b{batch}"] = row
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=list(BATCHES),
                        help="batch sizes of the MNIST training step to time")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                        help="BLAS thread limits to time each step with")
    parser.add_argument("--idle-only", action="store_true",
                        help="skip the second pass with one core kept busy")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    batches, threads = tuple(args.batch_sizes), tuple(args.threads)
    result: dict[str, Any] = {"benchmark": "blas_threads", "machine": machine()}
    result["idle"] = measure(batches, threads)
    if not args.idle_only:
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            time.sleep(0.5)
            result["one_core_loaded"] = measure(batches, threads)
        finally:
            spinner.kill()
            spinner.wait()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
