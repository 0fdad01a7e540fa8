"""Build, differentiate and lower an n-layer MLP for growing n: time of each phase and its
growth from n to 10n.

Phases: ``build`` (the forward graph of n ``gelu(h @ w_i + b_i)`` layers and the main graph
that calls it), ``autodiff`` (``grad_of_call`` over every weight and bias), ``update`` (one
``scaled_add_`` SGD update per parameter), ``session`` (``Session(ir)``: lowering, buffer plan,
code generation) and ``run`` (the first training step). Linear work grows 10x when n does;
``ratio`` is each phase's time at 10n over its time at n. Prints JSON. Run
``PYTHONPATH=. python benchmarks/scaling.py [--sizes 100 1000 10000] [--profile PHASE]``.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import time
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


def phases(n: int, profile: str | None = None) -> dict[str, float]:
    """Seconds per phase for an ``n``-layer MLP (``profile``: print that phase's cProfile)."""
    rng = np.random.default_rng(0)
    times: dict[str, float] = {}
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
        state["session"] = xlgraph.Session(state["ir"])

    def run() -> None:
        x = rng.normal(size=(BATCH, WIDTH)).astype(np.float32)
        with state["session"] as s:
            out = s.run({state["s_x"]: x})
        assert np.isfinite(out[state["s_loss"]])

    for name, fn in zip(PHASES, (build, autodiff, update, session, run)):
        profiler = cProfile.Profile() if name == profile else None
        start = time.perf_counter()
        if profiler:
            profiler.enable()
        fn()
        if profiler:
            profiler.disable()
        times[name] = round(time.perf_counter() - start, 4)
        if profiler:
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--profile", choices=PHASES, help="cProfile this phase at the last size")
    args = parser.parse_args()
    phases(2)  # warm up: imports, and the numba kernels that every Session shares
    result: dict[str, Any] = {"machine": machine(), "layers": {}}
    for i, n in enumerate(args.sizes):
        result["layers"][n] = phases(n, args.profile if i == len(args.sizes) - 1 else None)
    sizes = args.sizes
    result["ratio"] = {
        f"{a}->{b}": {p: round(result["layers"][b][p] / max(result["layers"][a][p], 1e-6), 2)
                      for p in PHASES}
        for a, b in zip(sizes, sizes[1:])}
    result["ready_s"] = {n: round(sum(t[p] for p in ("build", "autodiff", "update", "session")),
                                  3) for n, t in result["layers"].items()}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
