"""The convolution and pooling kernels' compiled forms against numpy: the CNN benchmark's
training step on both backends, and the col2im loop against the numpy adds, bit for bit."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph.lower.backends import TOLERANCE

pytest.importorskip("numba", reason="needs the fast extra")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from cnn import batches, build_cnn  # noqa: E402

conv_module = importlib.import_module("xlgraph.ops.conv")


def _train(backend: str, steps: int = 3) -> tuple[list[float], list[np.ndarray], str]:
    ir, img, lab, seed, loss = build_cnn(8)
    session = popxl.Session(ir, backend=backend, compile_in_background=False)
    with session:
        losses = [float(session.run({img: x, lab: y, seed: np.array([i, 7], np.uint32)})[loss])
                  for i, (x, y) in enumerate(batches(8, steps))]
    return losses, [session.get_tensor_data(v) for v in ir.main_graph.variables], session.source


def test_cnn_step_runs_compiled_window_kernels_and_trains_like_numpy() -> None:
    losses, weights, source = _train("numba")
    ref_losses, ref_weights, ref_source = _train("numpy")
    for op in ("max_pool", "max_pool_grad", "conv_transpose"):
        assert f"j_{op}(" in source and f"j_{op}(" not in ref_source
    np.testing.assert_allclose(losses, ref_losses, **TOLERANCE["float32"])
    assert len(weights) == 8
    for a, b in zip(weights, ref_weights):
        np.testing.assert_allclose(a, b, **TOLERANCE["float32"])


@pytest.mark.parametrize(("kernel", "stride", "dilation", "groups", "channels"),
                         [((3, 3), (1, 1), (1, 1), 1, 6), ((2, 3), (2, 1), (1, 2), 2, 6),
                          ((3, 2), (1, 2), (2, 1), 1, 6), ((3, 3), (1, 1), (1, 1), 1, 20)])
def test_col2im_loop_adds_like_numpy(kernel: tuple[int, int], stride: tuple[int, int],
                                     dilation: tuple[int, int], groups: int,
                                     channels: int) -> None:
    from xlgraph.lower.backends.numba_backend import NumbaBackend
    from xlgraph.ops.window import taps
    from xlgraph.ops.window_loops import col2im_2d

    rng = np.random.default_rng(3)
    out = (4, 5)
    sizes = tuple((o - 1) * s + (k - 1) * d + 1 for o, s, k, d in zip(out, stride, kernel,
                                                                       dilation))
    cols = rng.normal(size=(3, kernel[0] * kernel[1], groups, out[0] * out[1], channels))
    cols = cols.astype(np.float32)
    want = np.full((3, groups, *sizes, channels), np.nan, np.float32)
    got = want.copy()
    conv_module._col2im(cols, want, taps(kernel, stride, dilation, out), out)
    NumbaBackend().jitted(col2im_2d)(cols, got, *out, *kernel, *stride, *dilation)
    np.testing.assert_array_equal(got, want)
