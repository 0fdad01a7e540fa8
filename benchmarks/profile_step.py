"""Time every line of a benchmark model's generated training step.

Two views of ``session.source``: each line run many times in a row with the step's buffers and
the variables bound (that line's cost with warm caches), and with ``--in-step`` each line timed
inside whole steps (where lines evict each other's data, as in a real step), run by a copy of
the generated source with a timer around every statement, those of loop bodies and of the
step's compiled functions (a large subgraph, such as GPT-2 small's backward pass) included.
``--cpu`` times the CPU time of this thread (``time.thread_time``) instead of wall time: on a
shared machine it moves much less with the other processes' load. The models: the PopXL MNIST
tutorial MLP (``mlp``), the seed-000 MNIST CNN of ``cnn.py`` (``cnn``) and the decoder of
``transformer.py`` (``gpt``, its float32 training step;
``gpt16`` its float16 one; ``gen`` its generation step, one token with the KV cache, at
``--batch``; ``--size small`` GPT-2 small's, ``--layers`` fewer layers). ``--by-op`` adds the
lines' totals by the op kinds they run. The last line printed is one ``Session.run``.

``fashion`` is the seed-003 classifier's Session as ``poptorch.trainingModel`` builds it (the
wrapper picks its backend and threads; ``--batch 16`` as the seed trains it).

Run: ``PYTHONPATH=. python benchmarks/profile_step.py [--model mlp] [--batch 8]
[--backend numba] [--in-step] [--cpu] [--size small] [--layers 12] [--by-op]``
(``--model mlp|cnn|fashion|gpt|gpt16|gen``).
"""

from __future__ import annotations

import argparse
import ast
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


def model_step(model: str, batch: int, backend: str, threads: int = 1, size: str = "round5",
               layers: int | None = None) -> tuple[popxl.Session, list[dict]]:
    """A Session (BLAS at one thread, ``threads`` chunk threads) and a few feeds for
    ``model`` (the decoder's models at ``size``, a ``gpt_model.SIZES`` key, with ``layers``
    layers if given)."""
    if model == "fashion":
        return poptorch_session(batch)
    if model == "gen":  # one generated token: the KV-cache decode step at position 40
        import gpt_model as gm

        cfg = gm.sized(size, layers)
        ir, ids_s, pos_s, _, named = gm.build_decode(cfg, batch, 136)
        session = popxl.Session(ir, backend=backend, blas_threads=1,
                                compile_in_background=False)
        gm.load(session, named, gm.initial_weights(cfg))
        return session, [{ids_s: np.full((batch,), 5 + i, np.int32),
                          pos_s: np.array([40 + i], np.int32)} for i in range(4)]
    if model in ("gpt", "gpt16"):
        import gpt_model as gm

        cfg = gm.sized(size, layers)
        ir, tok, _, named = gm.build_train(cfg, batch, half=model == "gpt16")
        session = popxl.Session(ir, backend=backend, blas_threads=1,
                                compile_in_background=False)
        gm.load(session, named, gm.initial_weights(cfg))
        return session, [{tok: t} for t in gm.token_batches(cfg, batch)]
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


def label(source_lines: list[str], node: ast.stmt) -> str:
    """The generated line of ``node`` (its op comment dropped)."""
    return source_lines[node.lineno - 1].strip().split("  #")[0]


def op_of(source_lines: list[str], node: ast.stmt) -> str:
    """The op kind(s) a line runs, from its comment (``... = matmul %a %b``; fused segments
    list theirs joined by ``+``), or ``-`` for lines without one."""
    comment = source_lines[node.lineno - 1].partition("  # ")[2]
    kinds = [part.split(" = ", 1)[1].split()[0] for part in comment.split(" | ")
             if " = " in part]
    return "+".join(dict.fromkeys(kinds)) or "-"


class _Timed(ast.NodeTransformer):
    """Wrap every simple statement of the step and of its compiled functions in
    ``_T[i] -= _clock()`` ... ``_T[i] += _clock()``; loop and branch bodies are wrapped
    statement by statement, and calls of the step's own functions are left bare (the lines of
    the function are timed instead). ``rows`` lists each timed statement's node."""

    def __init__(self, functions: set[str]) -> None:
        self.functions, self.rows = functions, []

    def calls_function(self, node: ast.stmt) -> bool:
        return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                   and n.func.id in self.functions for n in ast.walk(node))

    def timed(self, body: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for node in body:
            if isinstance(node, (ast.For, ast.While, ast.If)):
                node.body, node.orelse = self.timed(node.body), self.timed(node.orelse)
                out.append(node)
                continue
            ret = None
            if isinstance(node, ast.Return) and node.value is not None:  # time the results
                ret = ast.Return(ast.Name("_R", ast.Load()))
                node = ast.copy_location(ast.Assign([ast.Name("_R", ast.Store())], node.value),
                                         node)
            if self.calls_function(node) or isinstance(node, ast.Return):
                out.append(node)
            else:
                i = len(self.rows)
                self.rows.append(node)
                out += [*ast.parse(f"_T[{i}] -= _clock()").body, node,
                        *ast.parse(f"_T[{i}] += _clock()").body]
            if ret is not None:
                out.append(ret)
        return out

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        node.body = self.timed(node.body)
        return node


def _step_rows(source: str) -> list[ast.stmt]:
    """The statements of ``step`` itself, for timing each on its own."""
    tree = ast.parse(source)
    step = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "step")
    if len(tree.body) > 1 or any(isinstance(n, (ast.For, ast.While, ast.If)) for n in step.body):
        raise SystemExit("this step has loops or compiled functions: time it with --in-step")
    return [n for n in step.body if not isinstance(n, ast.Return)]


def _bind(session: popxl.Session, feed: dict) -> dict[str, Any]:
    """The step's globals with its arguments bound as the Session would pass them."""
    ex = session.executable
    names = dict(ex.compiled.fn.__globals__)
    inputs = [feed[s] for s in ex.h2d]
    outputs = [np.zeros(s.shape, s.dtype.as_numpy()) for s in ex.d2h]
    names.update(IN=inputs, OUT=outputs, V=ex.state[0], N=ex.state[1])
    return names


def time_in_step(session: popxl.Session, feeds: list[dict], number: int, timer: Any,
                 ) -> tuple[list[tuple[float, ast.stmt]], list[np.ndarray]]:
    """Each timed statement's microseconds per step, inside ``number`` whole steps (after 3
    untimed) run by an instrumented copy of the generated source, and the last step's
    outputs (by device-to-host stream)."""
    source = session.executable.source
    tree = ast.parse(source)
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    timed = _Timed(functions)
    tree = ast.fix_missing_locations(timed.visit(tree))
    code = compile(tree, "<step>", "exec")
    totals = np.zeros(len(timed.rows))
    for k in range(number + 3):
        names = _bind(session, feeds[k % len(feeds)])
        names.update(_T=[0.0] * len(timed.rows), _clock=timer)
        exec(code, names)  # noqa: S102 - the generated source, as the Session runs it
        names["step"](names["IN"], names["OUT"], names["V"], names["N"])
        if k >= 3:
            totals += np.array(names["_T"])
        names.get("UNDO", []).clear()  # regions saved for a failed run (lower.undo)
    return [(t / number * 1e6, node) for t, node in zip(totals, timed.rows)], names["OUT"]


def line_times(model: str, batch: int, backend: str, number: int = 2000, in_step: bool = False,
               cpu: bool = False, threads: int = 1, size: str = "round5",
               layers: int | None = None) -> tuple[list[tuple[float, str, str]], float]:
    """Microseconds per execution of each line of the step (with its op kinds), and of one
    whole ``run``."""
    timer = time.thread_time if cpu else time.perf_counter
    session, feeds = model_step(model, batch, backend, threads, size, layers)
    # the lines run outside ``Session.run``: route conv/pool chunks to its pool as a run does
    with session, chunks_on(session._chunk_pool.executor):
        session.run(feeds[0])
        source_lines = session.executable.source.splitlines()
        if in_step:
            timed, _ = time_in_step(session, feeds, number, timer)
        else:
            names = _bind(session, feeds[0])
            timed = []
            for node in _step_rows(session.executable.source):
                code = label(source_lines, node)
                exec(code, names)  # noqa: S102 - the generated source, as the Session runs it
                best = min(timeit.repeat(code, globals=names, number=number, repeat=5,
                                         timer=timer))
                timed.append((best / number * 1e6, node))
        rows = [(us, label(source_lines, node), op_of(source_lines, node))
                for us, node in timed]
        run = min(timeit.repeat(lambda: session.run(feeds[0]), number=number,
                                repeat=5 if number > 10 else 2, timer=timer))
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
    parser.add_argument("--size", default="round5", choices=["round5", "small"],
                        help="the decoder's size (gpt, gpt16, gen): round five's, GPT-2 small")
    parser.add_argument("--layers", type=int, default=None,
                        help="the decoder's layers (default: its size's)")
    parser.add_argument("--by-op", action="store_true",
                        help="also total the lines by the op kinds they run")
    args = parser.parse_args()
    number = args.number or (2000 if args.model == "mlp" else 50)
    rows, run = line_times(args.model, args.batch, args.backend, number, args.in_step, args.cpu,
                           args.threads, args.size, args.layers)
    print(f"# machine: {json.dumps(machine())}")
    for us, code, _ in rows:
        print(f"{us:9.2f}  {code[:100]}")
    print(f"{sum(us for us, _, _ in rows):9.2f}  sum of the lines")
    if args.by_op:
        kinds: dict[str, list[float]] = {}
        for us, _, op in rows:
            kinds.setdefault(op, []).append(us)
        for op, times in sorted(kinds.items(), key=lambda kv: -sum(kv[1])):
            print(f"{sum(times):9.2f}  {len(times):4d} x {op[:90]}")
    print(f"{run:9.2f}  Session.run")


if __name__ == "__main__":
    main()
