"""The IPU model's epoch-time estimates for the two PopTorch tutorials run on real IPUs.

Seed 003 (the Fashion-MNIST PopTorch tutorial: conv 1->5 k3, max-pool, conv 5->12 k5, group
norm, linear 972->100->10, NLL, SGD with momentum) trains batch 16, one step per host round trip,
3,750 steps per epoch. Seed 000 (the PopTorch MNIST CNN demo: two conv/pool/relu blocks, linear
1600->128->10 with dropout, cross-entropy, SGD) trains batch 8 with 50 device iterations, 7,500
steps per epoch. Both networks are the examples' (``examples/mnist/fashion.py`` and ``cnn.py``),
built with ``xlgraph.training.build_train_step`` as ``xlgraph.poptorch.trainingModel`` builds
them. Prints JSON: per program the estimate on a whole Mk2 chip, the 4-tile default's verdict,
and the top ops.

For seed 003 it also gives the end-to-end epoch in three parts: the host-side time measured on
this machine while the tutorial's own loop (``examples/mnist/poptorch_port.py``: its
``poptorch.DataLoader`` over ``xlgraph.vision``'s ``FashionMNIST`` with the ``ToTensor``/
``Normalize`` transform, the ``trainingModel`` call, ``loss.item()``) drives
``--measure-steps`` simulated runs on synthetic 28 x 28 images, scaled to the epoch's 3,750
runs (``benchmarks/seed003_epoch.py`` times the whole epoch on the CPU); the modelled host
link (stream bytes plus one host round trip per run); and the modelled device time; against the
9.5 s the seed measured on an IPU.

Run: ``PYTHONPATH=. python benchmarks/ipu_model_epochs.py [--measure-steps 400]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "mnist"))
sys.path.append(str(Path(__file__).resolve().parent))  # after examples/mnist: cnn is the example
import cnn  # noqa: E402
import fashion  # noqa: E402
from harness import machine  # noqa: E402

import xlgraph  # noqa: E402
from xlgraph import errors, nn, optim, training  # noqa: E402

IMAGE = (1, 28, 28)
PROGRAMS = {
    # name: (model, loss, optimiser, batch, steps per Session.run, steps per epoch, dropout)
    "seed003_fashion_poptorch": (fashion.ClassificationModel, fashion.nll,
                                 lambda: optim.SGD(lr=0.001, momentum=0.9), 16, 1, 3750, False),
    "seed000_mnist_cnn": (cnn.Network, nn.cross_entropy, lambda: optim.SGD(lr=0.03), 8, 50, 7500,
                          True),
}


def build(name: str) -> xlgraph.Ir:
    model, loss, optimizer, batch, per_run, _, dropout = PROGRAMS[name]
    ir = xlgraph.Ir()
    training.build_train_step(
        ir, model(), loss, optimizer(), [xlgraph.TensorSpec((batch, *IMAGE), xlgraph.float32)],
        [xlgraph.TensorSpec((batch,), xlgraph.int32)], seed=0 if dropout else None,
        init_seed=0, num_host_transfers=per_run)
    return ir


def estimate(name: str) -> dict[str, Any]:
    _, _, _, batch, per_run, steps, _ = PROGRAMS[name]
    try:
        xlgraph.Session(build(name), "ipu_model")
        four_tiles = "fits"
    except errors.OutOfMemoryError as exc:
        four_tiles = str(exc).split(";")[0]
    report = xlgraph.Session(build(name), "ipu_model", ipu_model=xlgraph.IPUModel.full()).report()
    runs = steps // per_run
    per_run_s = report.estimated_seconds_per_run
    clock = report.model.tile_clock_frequency
    peak = report.memory.peak
    return {
        "batch": batch, "steps_per_run": per_run, "runs_per_epoch": runs,
        "cycles_per_run": round(report.cycles.total),
        "device_us_per_run": round(report.cycles.device_cycles / clock * 1e6, 2),
        "host_us_per_run": round(report.cycles.host_cycles / clock * 1e6, 2),
        "estimated_s_per_epoch": round(per_run_s * runs, 3),
        "estimated_device_s_per_epoch": round(report.cycles.device_cycles / clock * runs, 3),
        "fullest_tile_bytes": int(peak.max()), "total_peak_bytes": int(peak.sum()),
        "default_4_tiles": four_tiles,
        "top_ops": [(r.name, round(r.cycles)) for r in report.cycles.rows[:5]],
    }


SEED003_REAL_EPOCH_S = 9.5  # seed 003's log, epochs 2-5 on an IPU-M2000: 365-376 steps/s


def measure_seed003_host_side(steps: int) -> dict[str, float]:
    """Host-side seconds per run of the seed-003 tutorial's loop, measured on this machine."""
    import poptorch_port
    import torch
    from seed003_epoch import synthetic_fashion_mnist

    import xlgraph.poptorch as poptorch
    from xlgraph import vision

    transform = vision.transforms.Compose([vision.transforms.ToTensor(),
                                           vision.transforms.Normalize((0.5,), (0.5,))])
    dataset = vision.datasets.FashionMNIST(synthetic_fashion_mnist(steps * 16), train=True,
                                           transform=transform)

    torch.manual_seed(0)
    opts = poptorch.Options()
    loader = poptorch.DataLoader(opts, dataset, batch_size=16, shuffle=True)
    model = poptorch_port.ClassificationModel()
    optimizer = poptorch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
    with_loss = poptorch_port.ModelwithLoss(model, torch.nn.CrossEntropyLoss())
    training = poptorch.trainingModel(with_loss, options=opts, optimizer=optimizer)
    for data, target in loader:
        _, loss = training(data, target)
        torch.mean(loss).item()
    timing = training._compiled.session.host_timing
    training.detachFromDevice()
    return {"runs": timing.runs, "host_side_us_per_run": timing.host_side_s_per_run * 1e6,
            "between_runs_s": timing.between_runs_s, "framework_s": timing.framework_s,
            "simulated_s": timing.simulated_s}


def end_to_end_seed003(steps: int) -> dict[str, Any]:
    """The seed-003 epoch in three parts, against the real IPU's 9.5 s."""
    _, _, _, _, per_run, epoch_steps, _ = PROGRAMS["seed003_fashion_poptorch"]
    runs = epoch_steps // per_run
    report = xlgraph.Session(build("seed003_fashion_poptorch"), "ipu_model",
                             ipu_model=xlgraph.IPUModel.full()).report()
    measured = measure_seed003_host_side(steps)
    report.host_side_s_per_run = measured["host_side_us_per_run"] / 1e6
    parts = {k: round(v, 3) for k, v in report.end_to_end(runs).items()}
    return {"runs_per_epoch": runs, "measured_over_runs": measured["runs"],
            "measured": {k: round(v, 3) for k, v in measured.items()},
            "epoch_s": parts, "real_ipu_epoch_s": SEED003_REAL_EPOCH_S,
            "dominant": max(("host_side", "host_link", "device"), key=parts.__getitem__)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--measure-steps", type=int, default=400,
                        help="seed-003 training steps to measure the host side over")
    args = parser.parse_args()
    out: dict[str, Any] = {"machine": machine()}
    out.update({name: estimate(name) for name in PROGRAMS})
    out["seed003_end_to_end"] = end_to_end_seed003(args.measure_steps)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
