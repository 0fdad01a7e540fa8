"""Benchmark: float16 programs against the same programs in float32, in one process.

Each case builds one program twice, once with float16 where users put it and once all in
float32, and times both in interleaved rounds:

- ``popxl_adam_mlp``: Graphcore's PopXL optimiser tutorial (``examples/addons/
  custom_optimizer.py``): the 784-512-512-512-10 GELU MLP of popxl-addons ``Linear`` layers,
  ``addons.autodiff``, cross-entropy, and the tutorial's Adam ``Module`` per variable (bias
  correction, a float32 step counter) at batch 8, its first moment in float16 (float32 in the
  float32 program);
- ``poptorch_cnn``: ``model.half()`` of the examples' PopTorch MNIST CNN
  (``benchmarks/poptorch.py``) with float16 images, SGD at batch 8, through
  ``poptorch.trainingModel``;
- ``transformer``: ``gpt_model.py``'s decoder training step at batch 8 (``--tiny``: the tests'
  tiny decoder), its weights and both Adam moments in float16 (loss scaling 1024).

Prints one JSON object: per case ``us_per_step`` (median over rounds) and ``us_per_step_best``
(fastest round) of ``float32`` and ``float16``, and ``float16/float32``; the machine (CPU
flags included) and the load average before and after. ``--cpu`` times the main thread's CPU
instead of wall time (on a loaded machine the wall time is mostly other processes' turns).

Run: ``PYTHONPATH=. python benchmarks/half.py [--quick] [--cases NAME ...] [--threads 1]
[--cpu]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpt_model as gm  # noqa: E402
from harness import interleaved, machine  # noqa: E402
from mlp import with_threads  # noqa: E402

import xlgraph as popxl  # noqa: E402
import xlgraph.addons as addons  # noqa: E402
from xlgraph import ops  # noqa: E402
from xlgraph.addons.layers import Linear  # noqa: E402

Step = Callable[[int], Any]
CASES = ("popxl_adam_mlp", "poptorch_cnn", "transformer")
DTYPES = ("float32", "float16")


class Net(addons.Module):
    """The tutorial's MLP: 784-512-512-512-10, GELU between the layers."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2, self.fc3, self.fc4 = Linear(512), Linear(512), Linear(512), Linear(10)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        x = x.reshape((-1, 28 * 28))
        for fc in (self.fc1, self.fc2, self.fc3):
            x = ops.gelu(fc(x))
        return self.fc4(x)


class Adam(addons.Module):
    """The tutorial's Adam: moments and step counter are the module's variables."""

    @popxl.in_sequence(True)
    def build(self, weight: popxl.TensorByRef, grad: popxl.Tensor, *, lr: float,
              first_order_dtype: popxl.dtype) -> None:
        first = self.add_variable_input("first_order", partial(np.zeros, weight.shape),
                                        first_order_dtype, by_ref=True)
        ops.var_updates.accumulate_moving_average_(first, grad, f=0.9)
        second = self.add_variable_input("second_order", partial(np.zeros, weight.shape),
                                         popxl.float32, by_ref=True)
        ops.var_updates.accumulate_moving_average_square_(second, grad, f=0.999)
        step = self.add_variable_input("step", partial(np.zeros, ()), popxl.float32, by_ref=True)
        updater = ops.var_updates.adam_updater(first, second, weight=weight, weight_decay=0.0,
                                               time_step=step, beta1=0.9, beta2=0.999,
                                               epsilon=1e-5)
        ops.scaled_add_(weight, updater, b=-lr)


def adam_mlp_program(batch: int, first_order_dtype: popxl.dtype) -> tuple[popxl.Ir, list, Any]:
    """The tutorial's training program: ``(ir, [image stream, label stream], loss stream)``."""
    ir = popxl.Ir()
    with ir.main_graph:
        img_s = popxl.h2d_stream((batch, 28, 28), popxl.float32, "image")
        lab_s = popxl.h2d_stream((batch,), popxl.int32, "labels")
        img, labels = ops.host_load(img_s), ops.host_load(lab_s)
        facts, fwd = Net().create_graph(img)
        bwd = addons.autodiff(fwd)
        variables = facts.init()
        info = fwd.bind(variables).call_with_info(img)
        loss, dx = addons.ops.cross_entropy_with_grad(info.outputs[0], labels)
        loss_s = popxl.d2h_stream(loss.shape, loss.dtype, "loss")
        ops.host_store(loss_s, loss)
        bwd_info = bwd.call_with_info(dx, args=bwd.grad_graph_info.inputs_dict(info))
        grads = bwd.grad_graph_info.fwd_parent_ins_to_grad_parent_outs(info, bwd_info)
        cache = addons.GraphCache()
        for name, var in variables.named_tensors.items():
            opt_facts, opt = cache.create_graph(Adam(), var, var.spec, lr=1e-3,
                                                first_order_dtype=first_order_dtype)
            opt.bind(opt_facts.init(prefix=f"{name}.adam")).call(var, grads[var])
    return ir, [img_s, lab_s], loss_s


def popxl_adam_mlp(dtype: str, batch: int = 8, tiny: bool = False) -> tuple[Step, Any]:
    ir, (img_s, lab_s), loss_s = adam_mlp_program(batch, getattr(popxl, dtype))
    rng = np.random.default_rng(0)
    feeds = [{img_s: rng.normal(size=(batch, 28, 28)).astype(np.float32),
              lab_s: rng.integers(0, 10, batch).astype(np.int32)} for _ in range(4)]
    session = popxl.Session(ir, blas_threads=None)
    session.wait_for_kernels()
    session.__enter__()
    return (lambda i: session.run(feeds[i % len(feeds)])[loss_s]), session


def poptorch_cnn(dtype: str, batch: int = 8, tiny: bool = False) -> tuple[Step, Any]:
    import torch
    from poptorch import data, torch_models

    import xlgraph.poptorch as poptorch

    model, _ = torch_models("mnist")
    if dtype == "float16":
        model.half()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.03)
    wrapped = poptorch.trainingModel(model, poptorch.Options(), optimizer)
    tensors = [(torch.from_numpy(x).to(getattr(torch, dtype)), torch.from_numpy(y))
               for x, y in data(batch, 1)]
    wrapped(*tensors[0])  # compiles; then wait for the compiled kernels, as the others do
    wrapped._compiled.session.wait_for_kernels()
    return (lambda i: wrapped(*tensors[i % len(tensors)])[1]), wrapped


def transformer(dtype: str, batch: int = 8, tiny: bool = False) -> tuple[Step, Any]:
    cfg = gm.TINY if tiny else gm.FULL
    half = dtype == "float16"
    ir, tok_s, loss_s, named = gm.build_train(cfg, batch, half=half,
                                              first_order=popxl.float16 if half else popxl.float32)
    session = popxl.Session(ir, blas_threads=None)
    gm.load(session, named, gm.initial_weights(cfg))
    session.wait_for_kernels()
    session.__enter__()
    data = gm.token_batches(cfg, batch)
    return (lambda i: session.run({tok_s: data[i % len(data)]})[loss_s]), session


MAKERS: dict[str, Callable[..., tuple[Step, Any]]] = {
    "popxl_adam_mlp": popxl_adam_mlp, "poptorch_cnn": poptorch_cnn, "transformer": transformer}


def losses(case: str, steps: int = 3, tiny: bool = True) -> dict[str, list[float]]:
    """Each program's loss over its first ``steps`` steps (the two train the same network)."""
    out = {}
    for dtype in DTYPES:
        step, _ = MAKERS[case](dtype, tiny=tiny)
        out[dtype] = [float(np.asarray(step(i), np.float32)) for i in range(steps)]
    return out


def time_case(case: str, quick: bool, tiny: bool = False, cpu: bool = False) -> dict[str, Any]:
    """Both programs of ``case`` in interleaved rounds (``cpu``: this thread's CPU time)."""
    steps = {dtype: MAKERS[case](dtype, tiny=tiny)[0] for dtype in DTYPES}
    calls = 1 if case == "transformer" and not tiny else (5 if quick else 20)
    times = interleaved(steps, calls, rounds=3 if quick else 7, warmup=2,
                        timer=time.thread_time if cpu else time.perf_counter)
    us = {k: v["median"] for k, v in times.items()}
    return {"us_per_step": us, "us_per_step_best": {k: v["min"] for k, v in times.items()},
            "float16/float32": round(us["float16"] / us["float32"], 3)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short loops (3 rounds)")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES,
                        help="the cases to time")
    parser.add_argument("--threads", type=int, default=1, help="BLAS and torch threads")
    parser.add_argument("--cpu", action="store_true",
                        help="time the main thread's CPU (time.thread_time) instead of wall time "
                             "(work on other threads is not counted)")
    parser.add_argument("--tiny", action="store_true",
                        help="the transformer case on the tests' tiny decoder (not a figure)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    result: dict[str, Any] = {"benchmark": "half", "machine": machine(), "threads": args.threads,
                              "timer": "thread_time" if args.cpu else "wall", "best": {}}
    with with_threads(args.threads):
        for case in args.cases:
            result["best"][case] = time_case(case, args.quick, args.tiny, args.cpu)
            print(json.dumps({case: result["best"][case]}), file=sys.stderr, flush=True)
    result["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
