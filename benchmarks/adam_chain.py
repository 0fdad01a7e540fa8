"""AdamW over GPT-2 small's weights: each update as one compiled loop against its four loops.

The program is the optimiser part of ``transformer.py --size small``'s training step: one
``AdamOptimizerStep`` per weight (float32 moments, weight decay, bias correction), each from
a gradient loaded from the host, for the token embedding and the first ``--layers`` layers
(all 12 hold 124 M parameters: seven float32 copies per session do not fit beside other
work on a small machine). Two Sessions on the numba backend, timed in interleaved rounds in
one process: ``chain`` as the lowering makes it (``lower.adam_chains``: one ``j_adam_step``
loop per weight) and ``four_loops`` with the chains left out (the moving averages, the
updater and ``scaled_add_`` as their own loops, as before). Their variables are compared
byte for byte after the runs.

Run: ``PYTHONPATH=. python benchmarks/adam_chain.py [--layers 1] [--cpu] [--rounds 5]``;
prints the machine, then JSON ``best.adam.us_per_step.{chain,four_loops}`` and the
parameter count.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from unittest import mock

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpt_model as gm  # noqa: E402
from harness import interleaved, machine  # noqa: E402

import xlgraph as popxl  # noqa: E402
from xlgraph import ops  # noqa: E402
from xlgraph.addons.optimizers import AdamOptimizerStep  # noqa: E402
from xlgraph.lower.codegen_chains import Chains  # noqa: E402


def build(layers: int) -> tuple[popxl.Ir, dict, list]:
    """The AdamW updates of GPT-2 small's embeddings and first ``layers`` layers: ``(ir,
    {stream: gradient}, variables and moments)``."""
    weights = gm.initial_weights(gm.sized("small", layers))
    rng = np.random.default_rng(0)
    ir = popxl.Ir()
    feeds, tensors = {}, []
    with ir.main_graph, popxl.in_sequence():
        for name, a in weights.items():
            var = popxl.variable(a, popxl.float32, name)
            stream = popxl.h2d_stream(a.shape, popxl.float32, f"{name}.grad")
            grad = ops.host_load(stream)
            facts, opt = AdamOptimizerStep(cache=True).create_graph(
                var, grad.spec, lr=gm.LR, beta1=gm.BETAS[0], beta2=gm.BETAS[1], eps=gm.EPS,
                weight_decay=gm.WEIGHT_DECAY, first_order_dtype=popxl.float32)
            state = facts.init()
            opt.bind(state).call(var, grad)
            feeds[stream] = (rng.normal(size=a.shape) * 1e-3).astype(np.float32)
            tensors += [var, *state.tensors]
    return ir, feeds, tensors


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cpu", action="store_true", help="CPU time of this thread")
    args = parser.parse_args()
    print(json.dumps({"machine": machine()}))
    ir, feeds, tensors = build(args.layers)
    sessions = {"chain": popxl.Session(ir, backend="numba", blas_threads=1,
                                       compile_in_background=False)}
    with mock.patch.object(Chains, "body_chains", lambda self, steps: None):
        sessions["four_loops"] = popxl.Session(ir, backend="numba", blas_threads=1,
                                               compile_in_background=False)
    assert "j_adam_step(" in sessions["chain"].source
    assert "j_adam_step(" not in sessions["four_loops"].source
    for session in sessions.values():
        session.__enter__()
    timer = time.thread_time if args.cpu else time.perf_counter
    result = interleaved({k: (lambda i, s=s: s.run(feeds)) for k, s in sessions.items()}, 2,
                         rounds=args.rounds, warmup=1, timer=timer)
    data = [s.get_tensors_data(tensors) for s in sessions.values()]
    same = all(np.asarray(data[0][t]).tobytes() == np.asarray(data[1][t]).tobytes()
               for t in tensors)
    for session in sessions.values():
        session.__exit__(None, None, None)
    params = sum(a.size for a in feeds.values())
    print(json.dumps({"best": {"adam": {"us_per_step": {k: v["median"] for k, v in result.items()},
                                        "fastest": {k: v["min"] for k, v in result.items()}}},
                      "parameters": int(params), "same_bytes": same,
                      "timer": "thread_time" if args.cpu else "wall"}))


if __name__ == "__main__":
    main()
