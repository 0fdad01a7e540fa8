"""The IPU model's epoch-time estimates for the two PopTorch tutorials run on real IPUs.

Seed 003 (the Fashion-MNIST PopTorch tutorial: conv 1->5 k3, max-pool, conv 5->12 k5, group
norm, linear 972->100->10, NLL, SGD with momentum) trains batch 16, one step per host round trip,
3,750 steps per epoch. Seed 000 (the PopTorch MNIST CNN demo: two conv/pool/relu blocks, linear
1600->128->10 with dropout, cross-entropy, SGD) trains batch 8 with 50 device iterations, 7,500
steps per epoch. Both networks are the examples' (``examples/mnist/fashion.py`` and ``cnn.py``),
built with ``xlgraph.training.build_train_step`` as ``xlgraph.poptorch.trainingModel`` builds
them. Prints JSON: per program the estimate on a whole Mk2 chip, the 4-tile default's verdict,
and the top ops.

Run: ``PYTHONPATH=. python benchmarks/ipu_model_epochs.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "mnist"))
import cnn  # noqa: E402
import fashion  # noqa: E402

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


def main() -> None:
    print(json.dumps({name: estimate(name) for name in PROGRAMS}, indent=1))


if __name__ == "__main__":
    main()
