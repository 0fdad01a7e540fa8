"""Time every line of a benchmark model's generated training step.

Two views of ``session.source``: each line run many times in a row with the step's buffers and
the variables bound (that line's cost with warm caches), and with ``--in-step`` each line timed
inside whole steps run line by line (where lines evict each other's data, as in a real step).
``--cpu`` times the CPU time of this thread (``time.thread_time``) instead of wall time: on a
shared machine it moves much less with the other processes' load. The models: the PopXL MNIST
tutorial MLP (``mlp``), the seed-000 MNIST CNN of ``cnn.py`` (``cnn``) and the decoder of
``transformer.py`` (``gpt``, its float32 training step;
``gpt16`` its float16 one; ``gen`` its generation step, one token with the KV cache, at
``--batch``). The last line
printed is one ``Session.run``.

``fashion`` is the seed-003 classifier's Session as ``poptorch.trainingModel`` builds it (the
wrapper picks its backend and threads; ``--batch 16`` as the seed trains it).

Run: ``PYTHONPATH=. python benchmarks/profile_step.py [--model mlp] [--batch 8]
[--backend numba] [--in-step] [--cpu]`` (``--model mlp|cnn|fashion|gpt|gpt16|gen``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import timeit
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import machine  # noqa: E402
from models import build_mlp, mnist_batches  # noqa: E402

import xlgraph as popxl  # noqa: E402
from xlgraph.ops.window import chunks_on  # noqa: E402


def poptorch_session(batch: int) -> tuple[popxl.Session, list[dict]]:
    """The Session of the seed-003 Fashion-MNIST classifier wrapped by
    ``poptorch.trainingModel`` (``benchmarks/poptorch.py``; its own backend and threads),
    compiled by a first call, and the stream feeds the wrapper makes of a few batches."""
    import poptorch as bench  # benchmarks/poptorch.py

    step = bench.poptorch_step("fashion", batch, 1, bench.data(batch, 1))
    step(0)
    compiled = step.wrapped._compiled
    compiled.session.wait_for_kernels()
    return compiled.session, [compiled.fast.feeds(t) for t in step.tensors]


def model_step(model: str, batch: int, backend: str,
               threads: int = 1) -> tuple[popxl.Session, list[dict]]:
    """A Session (BLAS at one thread, ``threads`` chunk threads) and a few feeds for
    ``model``."""
    if model == "fashion":
        return poptorch_session(batch)
    if model == "gen":  # one generated token: the KV-cache decode step at position 40
        import gpt_model as gm

        ir, ids_s, pos_s, _, named = gm.build_decode(gm.FULL, batch, 136)
        session = popxl.Session(ir, backend=backend, blas_threads=1,
                                compile_in_background=False)
        gm.load(session, named, gm.initial_weights(gm.FULL))
        return session, [{ids_s: np.full((batch,), 5 + i, np.int32),
                          pos_s: np.array([40 + i], np.int32)} for i in range(4)]
    if model in ("gpt", "gpt16"):
        import gpt_model as gm

        ir, tok, _, named = gm.build_train(gm.FULL, batch, half=model == "gpt16")
        session = popxl.Session(ir, backend=backend, blas_threads=1,
                                compile_in_background=False)
        gm.load(session, named, gm.initial_weights(gm.FULL))
        return session, [{tok: t} for t in gm.token_batches(gm.FULL, batch)]
    if model == "cnn":
        from cnn import batches, build_cnn

        ir, img, lab, seed, _ = build_cnn(batch)
        session = popxl.Session(ir, backend=backend, blas_threads=1, chunk_threads=threads,
                                compile_in_background=False)
        feeds = [{img: x, lab: y, seed: np.array([i, 7], np.uint32)}
                 for i, (x, y) in enumerate(batches(batch, 4))]
        return session, feeds
    m = build_mlp(batch)
    session = popxl.Session(m.ir, backend=backend, blas_threads=1,
                            compile_in_background=False)
    return session, [{m.images: x, m.labels: y} for x, y in mnist_batches(batch, 4)]


def _lines(source: str) -> list[str]:
    """The step's statements (the generated MNIST steps have no loops or branches)."""
    rows = []
    for line in source.splitlines():
        code = line.strip().split("  #")[0]
        if line.startswith("    ") and code and not code.startswith(("#", "return")):
            rows.append(code)
    return rows


def _bind(session: popxl.Session, feed: dict) -> dict[str, Any]:
    """The step's globals with its arguments bound as the Session would pass them."""
    ex = session.executable
    names = dict(ex.compiled.fn.__globals__)
    inputs = [feed[s] for s in ex.h2d]
    outputs = [np.zeros(s.shape, s.dtype.as_numpy()) for s in ex.d2h]
    names.update(IN=inputs, OUT=outputs, V=ex.state[0], N=ex.state[1])
    return names


def line_times(model: str, batch: int, backend: str, number: int = 2000, in_step: bool = False,
               cpu: bool = False, threads: int = 1) -> tuple[list[tuple[float, str]], float]:
    """Microseconds per execution of each line of the step, and of one whole ``run``."""
    timer = time.thread_time if cpu else time.perf_counter
    session, feeds = model_step(model, batch, backend, threads)
    # the lines run outside ``Session.run``: route conv/pool chunks to its pool as a run does
    with session, chunks_on(session._chunk_pool.executor):
        session.run(feeds[0])
        codes = _lines(session.executable.source)
        if in_step:
            compiled = [compile(code, "<step>", "exec") for code in codes]
            totals = [0.0] * len(codes)
            for k in range(number + 3):
                names = _bind(session, feeds[k % len(feeds)])
                for i, code in enumerate(compiled):
                    start = timer()
                    exec(code, names)  # noqa: S102 - the generated source, as the Session runs it
                    if k >= 3:
                        totals[i] += timer() - start
                names.get("UNDO", []).clear()  # regions saved for a failed run (lower.undo)
            rows = [(t / number * 1e6, code) for t, code in zip(totals, codes)]
        else:
            names = _bind(session, feeds[0])
            rows = []
            for code in codes:
                exec(code, names)  # noqa: S102 - the generated source, as the Session runs it
                best = min(timeit.repeat(code, globals=names, number=number, repeat=5,
                                         timer=timer))
                rows.append((best / number * 1e6, code))
        run = min(timeit.repeat(lambda: session.run(feeds[0]), number=number, repeat=5,
                                timer=timer))
    return rows, run / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mlp",
                        choices=["mlp", "cnn", "fashion", "gpt", "gpt16", "gen"])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--backend", default="numba", choices=["numpy", "numba"])
    parser.add_argument("--number", type=int, default=None,
                        help="executions per line (default 2000 for the MLP, 50 for the CNN)")
    parser.add_argument("--in-step", action="store_true",
                        help="time each line inside whole steps instead of on its own")
    parser.add_argument("--cpu", action="store_true", help="CPU time of this thread")
    parser.add_argument("--threads", type=int, default=1,
                        help="the CNN's chunk threads (its parallel loops' threads)")
    args = parser.parse_args()
    number = args.number or (2000 if args.model == "mlp" else 50)
    rows, run = line_times(args.model, args.batch, args.backend, number, args.in_step, args.cpu,
                           args.threads)
    print(f"# machine: {json.dumps(machine())}")
    for us, code in rows:
        print(f"{us:9.2f}  {code[:100]}")
    print(f"{sum(us for us, _ in rows):9.2f}  sum of the lines")
    print(f"{run:9.2f}  Session.run")


if __name__ == "__main__":
    main()
