"""Build, differentiate and lower an n-layer MLP for growing n: time of each phase and its
growth from n to 10n.

Phases: ``build`` (the forward graph of n ``gelu(h @ w_i + b_i)`` layers and the main graph
that calls it), ``autodiff`` (``grad_of_call`` over every weight and bias), ``update`` (one
``scaled_add_`` SGD update per parameter), ``session`` (``Session(ir)``: lowering, buffer plan,
code generation) and ``run`` (the first training step). Linear work grows 10x when n does;
``ratio`` is each phase's time at 10n over its time at n.

Before each phase the benchmark runs a full garbage collection (timed apart, as ``collect``),
so a phase pays for the collections its own allocations trigger, not for a debt left by the
phase before it (a 10000-layer Ir makes a million long-lived objects that Python's collector
walks again, in whatever phase crosses its threshold). ``ready_s`` adds build, autodiff,
update and Session without those collections; ``ready_as_user_s`` times the same four phases
straight through at the largest size, with no collection forced, as a program would run them.
Each phase is timed two ways: ``cpu`` (this process's CPU seconds, ``time.process_time``: what
the work costs, unaffected by other processes taking turns on a busy machine) and ``wall``
(``time.perf_counter``). Every size but the largest is built ``--repeats`` times and each
phase keeps its fastest (smallest) time, so a phase of a millisecond is not decided by one
scheduler tick or one garbage collection (the largest: ``--last-repeats`` times). ``ratio`` uses
the CPU times, ``ratio_wall`` the wall times. Prints JSON. Run ``PYTHONPATH=. python
benchmarks/scaling.py [--sizes 100 1000 10000] [--repeats 5] [--last-repeats 2]
[--profile PHASE [--sort tottime]] [--as-user]``; ``--as-user`` times every size as
``ready_as_user_s`` does, with the Session's kernels compiled in the background (waited for
after the phase, untimed), as the round-four build target measures it.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from harness import machine

import xlgraph
from xlgraph import ops
from xlgraph.transforms import grad_of_call

WIDTH, BATCH = 8, 4
PHASES = ("build", "autodiff", "update", "session", "run")


def _forward(x: xlgraph.Tensor, *params: xlgraph.Tensor) -> xlgraph.Tensor:
    h = x
    for w, b in zip(params[::2], params[1::2]):
        h = ops.gelu(h @ w + b)
    return ops.sum(h * h)


def phases(n: int, profile: str | None = None, sort: str = "cumulative", collect: bool = True,
           background: bool = False) -> dict[str, dict[str, float]]:
    """``{"cpu": {phase: s}, "wall": {phase: s}}`` for an ``n``-layer MLP (``profile``: print
    that phase's cProfile, sorted by ``sort``; ``collect``: a full collection before each
    phase, its time under ``"collect"``; ``background``: ``Session(ir)`` as users make it, its
    kernels compiled by the kernel thread, waited for after the phase's timing, and each
    phase's CPU time this thread's alone)."""
    rng = np.random.default_rng(0)
    times: dict[str, dict[str, float]] = {"cpu": {}, "wall": {}}
    state: dict[str, Any] = {}

    def build() -> None:
        ir = xlgraph.Ir()
        with ir.main_graph:
            params = []
            for i in range(n):
                params.append(xlgraph.variable(
                    rng.normal(0, 0.3, (WIDTH, WIDTH)).astype(np.float32), name=f"w{i}"))
                params.append(xlgraph.variable(np.zeros(WIDTH, np.float32), name=f"b{i}"))
            s_x = xlgraph.h2d_stream((BATCH, WIDTH), xlgraph.float32, "x")
            graph = ir.create_graph(_forward, s_x.spec, *(p.spec for p in params))
            site = ops.call_with_info(graph, ops.host_load(s_x), *params)
            s_loss = xlgraph.d2h_stream((), xlgraph.float32, "loss")
            ops.host_store(s_loss, site.outputs[0])
        state.update(ir=ir, params=params, site=site, s_x=s_x, s_loss=s_loss)

    def autodiff() -> None:
        with state["ir"].main_graph:
            state["grads"] = grad_of_call(state["site"], wrt=state["params"])

    def update() -> None:
        with state["ir"].main_graph:
            for p in state["params"]:
                ops.scaled_add_(p, state["grads"][p], b=-0.01)

    def session() -> None:
        # compiled before it returns unless ``background``: no thread runs into the next
        # phase either way (its CPU time would count there)
        state["session"] = xlgraph.Session(state["ir"], compile_in_background=background)

    def run() -> None:
        x = rng.normal(size=(BATCH, WIDTH)).astype(np.float32)
        with state["session"] as s:
            out = s.run({state["s_x"]: x})
        assert np.isfinite(out[state["s_loss"]])

    for name, fn in zip(PHASES, (build, autodiff, update, session, run)):
        if collect:
            _timed(times, "collect", gc.collect)
        if name != profile:
            # the kernel thread compiles meanwhile: count this thread's CPU alone
            _timed(times, name, fn, time.thread_time if background else time.process_time)
            if name == "session" and background:
                state["session"].wait_for_kernels()
            continue
        profiler = cProfile.Profile()
        _timed(times, name, lambda: profiler.runcall(fn))  # noqa: B023 - called at once
        pstats.Stats(profiler).sort_stats(sort).print_stats(25)
    return times


def _timed(times: dict[str, dict[str, float]], name: str, fn: Callable[[], object],
           cpu_clock: Callable[[], float] = time.process_time) -> None:
    """Run ``fn``; add its CPU (``cpu_clock``) and wall seconds to ``times[clock][name]``."""
    start, cpu = time.perf_counter(), cpu_clock()
    fn()
    for clock, spent in (("wall", time.perf_counter() - start), ("cpu", cpu_clock() - cpu)):
        times[clock][name] = round(times[clock].get(name, 0.0) + spent, 4)


def fastest(n: int, repeats: int, profile: str | None, sort: str, as_user: bool = False,
            ) -> dict[str, dict[str, float]]:
    """``phases(n)`` ``repeats`` times; each phase's smallest time (the profile: last run;
    ``as_user``: no forced collections, the kernels compiled in the background)."""
    runs = [phases(n, profile if r == repeats - 1 else None, sort, collect=not as_user,
                   background=as_user) for r in range(repeats)]
    return {clock: {p: round(min(run[clock].get(p, 0.0) for run in runs), 4)
                    for p in (*PHASES, "collect")} for clock in ("cpu", "wall")}


def _ratios(layers: dict[int, dict[str, dict[str, float]]], sizes: list[int], clock: str,
            ) -> dict[str, dict[str, float]]:
    return {f"{a}->{b}": {p: round(layers[b][clock][p] / max(layers[a][clock][p], 1e-6), 2)
                          for p in (*PHASES, "collect")} for a, b in zip(sizes, sizes[1:])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--repeats", type=int, default=5,
                        help="runs of every size but the largest (each phase keeps its fastest)")
    parser.add_argument("--last-repeats", type=int, default=2, help="runs of the largest size")
    parser.add_argument("--profile", choices=PHASES, help="cProfile this phase at the last size")
    parser.add_argument("--sort", default="cumulative", help="pstats order of the profile")
    parser.add_argument("--as-user", action="store_true",
                        help="every size as a program runs it: no forced collections, the "
                             "Session's kernels compiled in the background (not timed)")
    args = parser.parse_args()
    phases(2)  # warm up: imports, and numba's on-disk cache of the kernels
    sizes = args.sizes
    result: dict[str, Any] = {"machine": machine(), "load_before": os.getloadavg(), "layers": {}}
    for i, n in enumerate(sizes):
        last = i == len(sizes) - 1
        result["layers"][n] = fastest(n, args.last_repeats if last else args.repeats,
                                      args.profile if last else None, args.sort, args.as_user)
    gc.collect()
    straight = phases(sizes[-1], collect=False)
    result["load_after"] = os.getloadavg()
    result["ratio"] = _ratios(result["layers"], sizes, "cpu")
    result["ratio_wall"] = _ratios(result["layers"], sizes, "wall")
    ready = ("build", "autodiff", "update", "session")
    result["ready_s"] = {clock: {n: round(sum(t[clock][p] for p in ready), 3)
                                 for n, t in result["layers"].items()} for clock in ("cpu", "wall")}
    result["ready_as_user_s"] = {
        clock: {sizes[-1]: round(sum(straight[clock][p] for p in ready), 3)}
        for clock in ("cpu", "wall")}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
