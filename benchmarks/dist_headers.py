"""The cost of the collective headers (``xlgraph.dist.exchange``): microseconds per cross-instance
all-gather with the header exchange (``check_headers=True``, what every collective does) and
without it, for 2 instances over MPI, at 16 bytes, 4 KiB and 1 MiB per instance.

Run ``python benchmarks/dist_headers.py [--quick]``: it starts itself as 2 instances through
``xlgraph-run``; instance 0 prints the JSON. Both settings are timed in interleaved rounds in
the same processes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np
from harness import interleaved, machine

SIZES = {"16B": 4, "4KiB": 1024, "1MiB": 262144}  # float32 elements per instance


def _instance(quick: bool) -> None:
    from xlgraph.dist.exchange import MpiExchange, import_mpi

    exchange = MpiExchange(import_mpi().COMM_WORLD, 60.0)
    rows = {}
    for label, n in SIZES.items():
        local = np.ones((1, n), np.float32)

        def run(check: bool, local: np.ndarray = local):
            def step(i: int) -> None:
                exchange.check_headers = check
                exchange.allgather(local, "all-reduce add")
            return step

        calls = 50 if quick else (400 if n < 100_000 else 100)
        rows[label] = interleaved({"with_header": run(True), "without": run(False)}, calls,
                                  rounds=3 if quick else 7)
        with_h, without = rows[label]["with_header"]["median"], rows[label]["without"]["median"]
        rows[label]["overhead_us"] = round(with_h - without, 1)
        rows[label]["ratio"] = round(with_h / without, 2)
    if exchange.rank == 0:
        print(json.dumps({"machine": machine(), "instances": exchange.size,
                          "us_per_collective": rows}, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if "XLGRAPH_NUM_INSTANCES" in os.environ:
        _instance(args.quick)
        return
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(here), here]))
    command = [sys.executable, "-m", "xlgraph.dist.run", "--num-instances", "2",
               "--num-replicas", "2", sys.executable, os.path.abspath(__file__),
               *(["--quick"] if args.quick else [])]
    sys.exit(subprocess.call(command, env=env))


if __name__ == "__main__":
    main()
