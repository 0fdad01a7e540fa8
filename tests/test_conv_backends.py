"""The convolution and pooling kernels' compiled forms against numpy: the CNN benchmark's
training step on both backends, the col2im loop against the numpy adds, bit for bit, and the
parallel loops (``window_parallel``) against the numpy kernels, on one thread and two."""

from __future__ import annotations

import importlib
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

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
    for op in ("conv", "conv_grad_weight", "max_pool", "max_pool_grad", "conv_transpose"):
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


# (x shape, w shape, stride, pads, dilation): channels-first and channels-last patches
# (``window.channels_last``), with padding, strides and dilations
PARALLEL_CASES = [((8, 1, 28, 28), (32, 1, 3, 3), (1, 1), (0, 0, 0, 0), (1, 1)),
                  ((5, 32, 13, 13), (64, 32, 3, 3), (1, 1), (0, 0, 0, 0), (1, 1)),
                  ((3, 4, 9, 8), (5, 4, 3, 2), (2, 1), (1, 2, 0, 1), (1, 2)),
                  ((2, 3, 7, 9), (4, 3, 2, 3), (1, 3), (2, 0, 1, 2), (2, 1)),
                  ((2, 7, 6, 7), (3, 7, 2, 3), (2, 2), (1, 0, 0, 1), (1, 2)),
                  ((3, 9, 6, 5), (4, 9, 3, 2), (1, 2), (2, 1, 1, 2), (1, 1))]


def _run_parallel(form: Any, arrays: list[np.ndarray], out: np.ndarray, threads: int) -> None:
    from xlgraph.lower.backends.numba_backend import NumbaBackend
    from xlgraph.ops.window import chunks_on
    from xlgraph.ops.window_parallel import run_parallel

    composite, _ = form
    loop = NumbaBackend().jitted(composite.loops["loop"], composite.parallel)
    with ThreadPoolExecutor(threads) as pool, chunks_on(pool if threads > 1 else None):
        run_parallel(*arrays, out, extra=composite.kwargs["extra"], loop=loop)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("xs", "ws", "stride", "pads", "dilation"), PARALLEL_CASES)
def test_parallel_conv_loops_match_numpy(xs: tuple[int, ...], ws: tuple[int, ...],
                                         stride: tuple[int, int], pads: tuple[int, ...],
                                         dilation: tuple[int, int], dtype: type) -> None:
    from xlgraph.ops import window_parallel as wp
    from xlgraph.tensor import TensorSpec

    rng = np.random.default_rng(5)
    x, w = (rng.normal(size=s).astype(dtype) for s in (xs, ws))
    y = conv_module._conv(x, w, stride, pads, dilation, 1)
    dy = rng.normal(size=y.shape).astype(dtype)
    want = {"conv": y,
            "conv_transpose": conv_module._conv_transpose(dy, w, stride, pads, dilation, 1,
                                                          xs[2:]),
            "conv_grad_weight": conv_module._conv_grad_weight(dy, x, stride, pads, dilation, 1,
                                                              ws[2:])}
    dt = popxl.float32 if dtype == np.float32 else popxl.float64
    spec = {k: TensorSpec(a.shape, dt) for k, a in (("x", x), ("w", w), ("dy", dy))}
    geo = (stride, pads, dilation, 1)
    forms = {"conv": (wp.conv_loop([spec["x"], spec["w"]], *geo), [x, w]),
             "conv_transpose": (wp.conv_transpose_loop([spec["dy"], spec["w"]], *geo, xs[2:]),
                                [dy, w]),
             "conv_grad_weight": (wp.conv_grad_weight_loop([spec["dy"], spec["x"]], *geo, ws[2:]),
                                  [dy, x])}
    tol = TOLERANCE["float32" if dtype == np.float32 else "float64"]
    for name, (form, arrays) in forms.items():
        assert form is not None, name
        got = {}
        for threads in (1, 2):
            got[threads] = np.full(want[name].shape, np.nan, dtype)
            _run_parallel(form, arrays, got[threads], threads)
        # (sums of thousands of products: the error scales with the largest element)
        np.testing.assert_allclose(got[1], want[name], rtol=tol["rtol"], err_msg=name,
                                   atol=tol["rtol"] * np.abs(want[name]).max())
        np.testing.assert_array_equal(got[2], got[1], err_msg=name)  # same bits on two threads


@pytest.mark.parametrize("shape", [(8, 32, 26, 26), (3, 2, 7, 5)])
def test_parallel_max_pool_loops_match_numpy(shape: tuple[int, ...]) -> None:
    from xlgraph.ops.window_parallel import max_pool_grad_loop, max_pool_loop
    from xlgraph.tensor import TensorSpec

    pool_module = importlib.import_module("xlgraph.ops.pool")
    rng = np.random.default_rng(6)
    x = rng.normal(size=shape).astype(np.float32)
    x[0, 0, 0, :2] = 1.5  # a tie: the first maximum takes the gradient
    x[-1, -1, 1, 1] = np.nan  # a NaN window: its gradient is dy times zero, as numpy multiplies
    geo = {"kernel": (2, 2), "stride": (2, 2), "pads": (0, 0, 0, 0), "dilation": (1, 1),
           "ceil_mode": False}
    y = pool_module._max_pool(x, **geo)
    dy = rng.normal(size=y.shape).astype(np.float32)  # negative ones give -0 elsewhere
    dy[-1, -1, 0, 0] = np.nan  # the NaN window's own gradient (y * 0 upstream) is NaN
    want = pool_module._max_pool_grad(dy, x, y, **geo)
    spec = TensorSpec(shape, popxl.float32)
    for threads in (1, 2):
        got_y, got_dx = np.full_like(y, np.nan), np.full_like(x, np.nan)
        _run_parallel(max_pool_loop([spec], **geo), [x], got_y, threads)
        _run_parallel(max_pool_grad_loop([TensorSpec(y.shape, popxl.float32), spec, spec], **geo),
                      [dy, x, y], got_dx, threads)
        np.testing.assert_array_equal(got_y.view(np.uint32), y.view(np.uint32))
        np.testing.assert_array_equal(got_dx.view(np.uint32), want.view(np.uint32))


ONE_OPENMP_THREAD = """
import ctypes
import sys
import numpy as np
import xlgraph as popxl
sys.path.insert(0, sys.argv[1])
from cnn import batches, build_cnn
omp = ctypes.CDLL("libgomp.so.1")  # loaded before numba's threads start, as torch loads it
omp.omp_set_num_threads(1)  # as torch.set_num_threads(1)
ir, img, lab, seed, loss = build_cnn(4)
session = popxl.Session(ir, backend="numba", chunk_threads=2, compile_in_background=False)
(x, y), = batches(4, 1)
with session:
    session.run({img: x, lab: y, seed: np.array([0, 7], np.uint32)})
    print(omp.omp_get_max_threads())
assert "j_conv(" in session.source
"""


def test_parallel_loops_leave_the_openmp_thread_count_alone() -> None:
    """numba's OpenMP threads set the OpenMP thread count of the thread that starts them,
    which other libraries read where they share the OpenMP library (torch's intra-op pool,
    when torch is imported first): a step on two chunk threads must leave it as it was (in a
    fresh process: numba's threads start once per process)."""
    bench = str(Path(__file__).resolve().parents[1] / "benchmarks")
    done = subprocess.run([sys.executable, "-c", ONE_OPENMP_THREAD, bench], capture_output=True,
                          text=True, timeout=600, check=True)
    assert done.stdout.split()[-1] == "1"
