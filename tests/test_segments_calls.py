"""Matrix products inside the numba backend's fused segments (``xlgraph.lower.segments``).

A segment multiplies matrices with numpy's own ``gemm`` (``xlgraph.ops.blas.matmul_into``):
the call ``np.matmul`` makes, so the bits are the numpy backend's, whatever the operands'
layouts (C, or F for a transposed view). A vector operand, or a numpy without its bundled
OpenBLAS, takes numba's ``np.dot`` (scipy's BLAS), within the backend's tolerance.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops
from xlgraph.lower.backends import TOLERANCE

pytest.importorskip("numba", reason="needs the fast extra")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from models import build_mlp, mnist_batches  # noqa: E402


def _products(dtype: type, rows: int) -> tuple[popxl.Ir, popxl.HostToDeviceStream, list]:
    """Products of every layout pair, chained so that they fuse into one segment: ``x`` is
    (rows, 40) from the host, ``w`` (40, 16) and ``v`` (16, 12) variables; ``x.T`` and
    ``w.T`` are F-contiguous views."""
    rng = np.random.default_rng(1)
    kind = popxl.float64 if dtype == np.float64 else popxl.float32
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        xs = popxl.h2d_stream((rows, 40), kind, "x")
        x = ops.host_load(xs)
        w = popxl.variable(rng.standard_normal((40, 16)).astype(dtype), kind, name="w")
        v = popxl.variable(rng.standard_normal((16, 12)).astype(dtype), kind, name="v")
        y = ops.matmul(x, w)  # C @ C
        z = ops.matmul(y, v)  # C @ C
        g = ops.matmul(ops.transpose(x), y)  # F @ C: the weight gradient's form
        back = ops.matmul(z, ops.transpose(v))  # C @ F
        both = ops.matmul(ops.transpose(w), ops.transpose(x))  # F @ F
        streams = []
        for i, t in enumerate((y, z, g, back, both)):
            streams.append(popxl.d2h_stream(t.shape, t.dtype, f"out{i}"))
            ops.host_store(streams[-1], t)
    return ir, xs, streams


def _run(ir: popxl.Ir, xs: popxl.HostToDeviceStream, streams: list, backend: str,
         x: np.ndarray) -> tuple[list[np.ndarray], str]:
    session = popxl.Session(ir, backend=backend, compile_in_background=False)
    with session:
        out = session.run({xs: x})
    return [out[s] for s in streams], session.source


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_segment_matmuls_give_numpys_bits_in_every_layout(dtype: type) -> None:
    x = np.random.default_rng(2).standard_normal((8, 40)).astype(dtype)
    got, source = _run(*_products(dtype, 8), "numba", x)
    want, _ = _run(*_products(dtype, 8), "numpy", x)
    code = [line.split("  #")[0] for line in source.splitlines() if not line.startswith("#")]
    assert sum("g0(" in line for line in code) == 1 and "o_matmul(" not in "".join(code)
    assert source.count("#     j_matmul(") == 5 and "np.dot(" not in source
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("case", ["vectors", "no numpy BLAS"])
def test_vectors_or_another_blas_take_numbas_dot(case: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``x`` of one row every product has a vector operand (a dimension of 1), which
    numpy multiplies by ``gemv`` or a dot product; without numpy's OpenBLAS there is no
    ``gemm`` to call. Either way the segment multiplies with numba's ``np.dot``."""
    from xlgraph.lower.backends.numba_backend import NumbaBackend

    rows = 1 if case == "vectors" else 8
    if case == "no numpy BLAS":
        monkeypatch.setattr(NumbaBackend, "matmul", lambda self, dtype: None)
    x = np.random.default_rng(3).standard_normal((rows, 40)).astype(np.float32)
    got, source = _run(*_products(np.float32, rows), "numba", x)
    want, _ = _run(*_products(np.float32, rows), "numpy", x)
    assert "j_matmul(" not in source and source.count("#     np.dot(") == 5
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, **TOLERANCE["float32"])


def test_the_kernel_thread_fuses_numpys_gemm_too() -> None:
    """A Session compiling in the background (the default) makes the same segments: the
    MNIST training step's five products (a program of products alone has no loop forms and
    keeps numpy's kernels)."""
    session = popxl.Session(build_mlp(8).ir, backend="numba")
    assert session.wait_for_kernels(timeout=600)
    assert session.source.count("#     j_matmul(") == 5 and "np.dot(" not in session.source


def test_segments_on_host_data_skip_numbas_type_dispatch() -> None:
    """The MNIST step's segment reads host data and views of it (C-contiguous as ``HostIO``
    hands it over, whatever the caller passed): it is bound to its machine code's entry point.
    Inputs in another layout, strided or read-only give the same results."""
    m = build_mlp(8)
    session = popxl.Session(m.ir, backend="numba", compile_in_background=False)
    segment = session.executable.compiled.fn.__globals__["g0"]
    assert not hasattr(segment, "overloads")  # not a numba dispatcher
    x, y = mnist_batches(8, 1)[0]
    odd = np.asfortranarray(x)
    odd.flags.writeable = False
    wide = np.zeros((8, 28, 56), np.float32)
    wide[:, :, ::2] = x
    losses = []
    with session:
        weights = [session.get_tensor_data(v).copy() for v in m.variables]
        for data in (x, odd, wide[:, :, ::2], x.astype(np.float64)):
            session.write_variables_data(dict(zip(m.variables, weights)))
            losses.append(session.run({m.images: data, m.labels: y})[m.out])
    assert all(np.array_equal(a, losses[0]) for a in losses)
