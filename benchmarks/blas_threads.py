"""Measure the MNIST training step with 1 and 2 BLAS threads, idle and with one core loaded.

For batch 8, 80 and 256, times the xlgraph Session and the hand-written numpy step under
``threadpoolctl`` limits of 1 and 2 threads, first on the machine as it is, then while a second
process spins on one core. Prints one JSON object (microseconds per step, medians). This is the
evidence for the thread policy in ``xlgraph/runtime/threads.py`` (see ``README.md``).

Run: ``PYTHONPATH=. python benchmarks/blas_threads.py`` (needs ``threadpoolctl``).
"""

from __future__ import annotations

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


def measure() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for batch in BATCHES:
        data = mnist_batches(batch, 8)
        calls = calls_for(batch, 150_000.0)
        row: dict[str, float] = {}
        for name, make in (("xlgraph", xlgraph_step), ("numpy", numpy_step)):
            for threads in (1, 2):
                with blas_threads(threads):
                    step, session = make("train", batch, data)  # xlgraph: no policy of its own
                    row[f"{name}_{threads}t"] = round(time_per_call(step, calls, repeats=5), 1)
                if session is not None:
                    session.__exit__(None, None, None)
        out[f"train_b{batch}"] = row
    return out


def main() -> None:
    result: dict[str, Any] = {"benchmark": "blas_threads", "machine": machine()}
    result["idle"] = measure()
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        result["one_core_loaded"] = measure()
    finally:
        spinner.kill()
        spinner.wait()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
