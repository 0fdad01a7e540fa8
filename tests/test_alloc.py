"""Steady-state training steps allocate almost nothing (measured with tracemalloc, not time).

The MNIST tutorial step at batch 128 runs from a planned buffer pool: every kernel writes into a
buffer allocated once at Session creation. What remains per step is numpy's own bounded
workspace (the buffer its iterator uses for a broadcast operand, the row indices of the loss),
the output dict and the loss array. The bound is two hidden-layer activations (2 x 16 KiB):
a kernel that allocates even one activation again (its result stays referenced until the step
returns) pushes the peak over it, while the interpreter allocates megabytes per step.
"""

from __future__ import annotations

import importlib.util
import sys
import tracemalloc
from pathlib import Path

import pytest

import xlgraph as popxl

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from models import HIDDEN, build_mlp, mnist_batches  # noqa: E402

BATCH = 128
BOUND = 2 * BATCH * HIDDEN * 4  # bytes: two float32 hidden activations


# tracemalloc counts every thread's allocations: no earlier test's compile may run meanwhile
pytestmark = pytest.mark.usefixtures("no_compiles_running")

BACKENDS = ["numpy"] + (["numba"] if importlib.util.find_spec("numba") else [])


def traced_step_memory(optimize: bool, steps: int = 12,
                       backend: str = "numpy") -> tuple[int, int]:
    """(peak bytes above the starting point, net growth) over ``steps`` warm training steps."""
    m = build_mlp(BATCH)
    session = popxl.Session(m.ir, optimize=optimize, backend=backend,
                            compile_in_background=False)
    feeds = [{m.images: x, m.labels: y} for x, y in mnist_batches(BATCH, 3)]
    with session:
        for f in feeds:  # warm up: first-run caches are not steady state
            session.run(f)
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            for i in range(steps):
                session.run(feeds[i % len(feeds)])
            current, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    return peak - base, current - base


@pytest.mark.parametrize("backend", BACKENDS)
def test_training_step_allocates_almost_nothing(backend: str) -> None:
    peak, growth = traced_step_memory(optimize=True, backend=backend)
    assert peak < BOUND, f"a steady-state step allocated up to {peak} bytes (bound {BOUND})"
    assert growth < 4096, f"steps leak {growth} bytes"


def test_the_measurement_sees_activation_allocations() -> None:
    """The interpreter allocates every activation: the same measurement must exceed the bound
    many times over, or the test above would prove nothing."""
    peak, _ = traced_step_memory(optimize=False, steps=3)
    assert peak > 20 * BOUND
