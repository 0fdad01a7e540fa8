"""Time every line of the MNIST tutorial's generated training step on its own.

Each line of ``session.source`` runs many times in a row with the step's buffers and the
variables bound, so the figure is that line's cost with warm caches (a full step, where lines
evict each other's data, takes longer: the last line printed is one ``Session.run``). Shows where
a step's time goes on each backend.

Run: ``PYTHONPATH=. python benchmarks/profile_step.py [--batch 8] [--backend numba]``.
"""

from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import build_mlp, mnist_batches  # noqa: E402

import xlgraph as popxl  # noqa: E402


def line_times(batch: int, backend: str, number: int = 2000) -> tuple[list[tuple[float, str]],
                                                                      float]:
    """Microseconds per execution of each line of the step, and of one whole ``run``."""
    m = build_mlp(batch)
    session = popxl.Session(m.ir, backend=backend, blas_threads=1)
    (x, y), = mnist_batches(batch, 1)
    feed = {m.images: x, m.labels: y}
    with session:
        session.run(feed)
        ex = session.executable
        names = dict(ex.compiled.fn.__globals__)
        names.update(IN=[x, y], OUT=[np.zeros((), np.float32)], V=ex.state[0], N=ex.state[1])
        rows = []
        for line in ex.source.splitlines():
            code = line.strip().split("  #")[0]
            if not line.startswith("    ") or not code or code.startswith(("#", "return")):
                continue
            exec(code, names)  # noqa: S102 - the generated source, as the Session runs it
            best = min(timeit.repeat(code, globals=names, number=number, repeat=5))
            rows.append((best / number * 1e6, code))
        run = min(timeit.repeat(lambda: session.run(feed), number=number, repeat=5))
    return rows, run / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--backend", default="numba", choices=["numpy", "numba"])
    args = parser.parse_args()
    rows, run = line_times(args.batch, args.backend)
    for us, code in rows:
        print(f"{us:8.2f}  {code[:100]}")
    print(f"{sum(us for us, _ in rows):8.2f}  sum of the lines")
    print(f"{run:8.2f}  Session.run")


if __name__ == "__main__":
    main()
