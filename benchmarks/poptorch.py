"""Benchmark: a ``poptorch.trainingModel`` step against the same model in ``xlgraph.nn`` and in
PyTorch eager, side by side in one process.

Models: the PopTorch MNIST demo's CNN (seed 000: conv 32, conv 64, linear 128 with dropout,
cross-entropy, SGD lr 0.03) at batch 8 with 1 and 50 device iterations per call, and the
Fashion-MNIST classifier of seeds 001/003 (GroupNorm, log-softmax, NLL, SGD with momentum) at
batch 16, one iteration per call (as the seeds train it). Contenders:

- ``poptorch``: the torch module through ``xlgraph.poptorch.trainingModel`` (torch tensors in
  and out, output mode ``All``);
- ``xlgraph_nn``: the same network written with ``xlgraph.nn`` (``examples/mnist/cnn.py`` and
  ``fashion.py``) and ``xlgraph.training.build_train_step``, fed numpy arrays;
- ``torch``: the torch module in eager mode (``optimizer.zero_grad(); loss.backward();
  optimizer.step()`` per micro-batch).

Prints one JSON object: median (and best) microseconds per training step over interleaved
rounds, and the ratios ``poptorch/xlgraph_nn`` and ``poptorch/torch`` (below 1: poptorch is
faster). Each contender is timed at every thread count of ``--threads`` (torch's intra-op pool
and numpy's BLAS) and keeps its fastest. Run:
``PYTHONPATH=. python benchmarks/poptorch.py [--quick] [--threads 1 2] [--configs fashion_b16]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "examples" / "mnist"))
from harness import blas_threads, interleaved, machine  # noqa: E402

import xlgraph  # noqa: E402
from xlgraph import ops, optim, training  # noqa: E402

CONFIGS = {  # name: (model, batch, device iterations)
    "mnist_b8": ("mnist", 8, 1),
    "mnist_b8x50": ("mnist", 8, 50),
    "fashion_b16": ("fashion", 16, 1),
}


def torch_models(kind: str) -> tuple[Any, Any]:
    """The seed's torch module (returning ``(output, loss)``) and its optimizer."""
    import torch
    from poptorch_port import ClassificationModel, ModelwithLoss
    from torch import nn

    torch.manual_seed(0)
    if kind == "fashion":  # seeds 001 and 003 (with the NLL loss of seed 001)
        net = ModelwithLoss(ClassificationModel(), nn.NLLLoss())
        net.model.log_softmax.dim = 1
        return net, torch.optim.SGD(net.parameters(), lr=0.001, momentum=0.9)

    class Block(nn.Module):
        def __init__(self, in_channels: int, num_filters: int) -> None:
            super().__init__()
            self.conv = nn.Conv2d(in_channels, num_filters, kernel_size=3)
            self.pool = nn.MaxPool2d(kernel_size=2)
            self.relu = nn.ReLU()

        def forward(self, x: Any) -> Any:
            return self.relu(self.pool(self.conv(x)))

    class Network(nn.Module):  # seed 000's network and its loss wrapper in one module
        def __init__(self) -> None:
            super().__init__()
            self.layer1, self.layer2 = Block(1, 32), Block(32, 64)
            self.layer3, self.layer3_act = nn.Linear(1600, 128), nn.ReLU()
            self.layer3_dropout, self.layer4 = nn.Dropout(0.5), nn.Linear(128, 10)
            self.loss = nn.CrossEntropyLoss()

        def forward(self, x: Any, labels: Any) -> Any:
            x = self.layer2(self.layer1(x)).view(-1, 1600)
            out = self.layer4(self.layer3_dropout(self.layer3_act(self.layer3(x))))
            return out, self.loss(out, labels)

    net = Network()
    return net, torch.optim.SGD(net.parameters(), lr=0.03)


def data(batch: int, iterations: int, count: int = 4) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    n = batch * iterations
    return [(rng.normal(size=(n, 1, 28, 28)).astype(np.float32),
             rng.integers(0, 10, n).astype(np.int64)) for _ in range(count)]


def poptorch_step(kind: str, batch: int, iterations: int, arrays: list) -> Any:
    import torch

    import xlgraph.poptorch as poptorch

    model, optimizer = torch_models(kind)
    opts = poptorch.Options().deviceIterations(iterations).outputMode(poptorch.OutputMode.All)
    wrapped = poptorch.trainingModel(model, opts, optimizer)
    tensors = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in arrays]

    def step(i: int) -> Any:
        return wrapped(*tensors[i % len(tensors)])

    step.steps = iterations
    step.wrapped, step.tensors = wrapped, tensors  # for profile_step.py --model fashion
    return step


def nn_step(kind: str, batch: int, iterations: int, arrays: list) -> Any:
    if kind == "mnist":
        import cnn

        model, loss, opt, seed = cnn.Network(), xlgraph.nn.cross_entropy, optim.SGD(lr=0.03), 0
    else:
        import fashion

        model, seed = fashion.ClassificationModel(), None
        opt = optim.SGD(lr=0.001, momentum=0.9)

        def loss(log_probs: xlgraph.Tensor, labels: xlgraph.Tensor) -> xlgraph.Tensor:
            return ops.nll_loss(log_probs, labels, log_prob=True)

    ir = xlgraph.Ir()
    built = training.build_train_step(
        ir, model, loss, opt, inputs=[xlgraph.TensorSpec((batch, 1, 28, 28), xlgraph.float32)],
        targets=[xlgraph.TensorSpec((batch,), xlgraph.int32)], seed=seed, init_seed=0,
        num_host_transfers=iterations)
    session = xlgraph.Session(ir)
    session.wait_for_kernels()
    session.__enter__()
    lead = (iterations,) if iterations > 1 else ()
    feeds = [(x.reshape(lead + (batch, 1, 28, 28)), y.astype(np.int32).reshape(lead + (batch,)))
             for x, y in arrays]

    def step(i: int) -> Any:
        return built.run(session, *feeds[i % len(feeds)])

    step.steps = iterations
    return step


def torch_step(kind: str, batch: int, iterations: int, arrays: list) -> Any:
    import torch

    model, optimizer = torch_models(kind)
    tensors = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in arrays]

    def step(i: int) -> Any:
        x, y = tensors[i % len(tensors)]
        for k in range(iterations):
            rows = slice(k * batch, (k + 1) * batch)
            optimizer.zero_grad()
            _, loss = model(x[rows], y[rows])
            loss.backward()
            optimizer.step()
        return loss.item()

    step.steps = iterations
    return step


def with_threads(n: int) -> Any:
    """Limit torch's intra-op pool and numpy's BLAS to ``n`` threads (``mlp.with_threads``;
    importing ``mlp`` would put ``benchmarks/`` first on the path, before the examples)."""
    import torch

    torch.set_num_threads(n)
    return blas_threads(n)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter loops")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                        help="torch intra-op and BLAS thread counts: every contender is timed "
                             "at each, and keeps its best (median) for the ratios")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"machine": machine(), "threads": args.threads}
    for name in args.configs:
        kind, batch, iterations = CONFIGS[name]
        arrays = data(batch, iterations)
        fns = {"poptorch": poptorch_step(kind, batch, iterations, arrays),
               "xlgraph_nn": nn_step(kind, batch, iterations, arrays),
               "torch": torch_step(kind, batch, iterations, arrays)}
        calls = max(2, (20 if args.quick else 120) // iterations)
        per_count = {}
        for n in args.threads:
            with with_threads(n):
                per_count[n] = interleaved(fns, calls, rounds=3 if args.quick else 7, warmup=2)
        best = {k: min(((n, per_count[n][k]) for n in args.threads),
                       key=lambda item: item[1]["median"]) for k in fns}
        us = {k: v["median"] for k, (_, v) in best.items()}
        result[name] = {
            "us_per_step": us, "us_per_step_best": {k: v["min"] for k, (_, v) in best.items()},
            "best_threads": {k: n for k, (n, _) in best.items()},
            "by_threads": {n: {k: v["median"] for k, v in t.items()}
                           for n, t in per_count.items()},
            "ratios": {"poptorch/xlgraph_nn": round(us["poptorch"] / us["xlgraph_nn"], 3),
                       "poptorch/torch": round(us["poptorch"] / us["torch"], 3)}}
    result["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
