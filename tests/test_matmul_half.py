"""``matmul`` of float16 operands multiplies in float32 and rounds the result to float16 once
(float32 partials, as the IPU accumulates), on every path: the kernel, a Session's pool
buffers on the numpy and numba backends, and the replicated forms over 1, 2 and 4 replicas."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops
from xlgraph.ops.matmul_kernel import matmul_out


def half_operands(*shapes: tuple[int, ...], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=s).astype(np.float16) for s in shapes]


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The float64 product of the float16 values, rounded to float16."""
    return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.float16)


@pytest.mark.parametrize("shapes", [((5, 64), (64, 7)), ((2, 3, 5, 64), (2, 3, 64, 4)),
                                    ((64,), (64, 3))])
def test_the_kernel_rounds_a_float32_product_once(shapes) -> None:
    a, b = half_operands(*shapes)
    got = matmul_out(a, b)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, np.matmul(a.astype(np.float32),
                                                 b.astype(np.float32)).astype(np.float16))
    # within one float16 rounding of the exact product (an f16 accumulator drifts further)
    np.testing.assert_allclose(got.astype(np.float64), reference(a, b).astype(np.float64),
                               rtol=2e-3, atol=2e-3)
    out = np.empty_like(got)
    assert matmul_out(a, b, out=out) is out
    np.testing.assert_array_equal(out, got)


def test_other_dtypes_are_numpys_matmul() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(4, 6)), rng.normal(size=(6, 3)).astype(np.float32)
    np.testing.assert_array_equal(matmul_out(a, b), np.matmul(a, b))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_session_gives_the_kernels_bytes(backend: str) -> None:
    a, b = half_operands((8, 64), (64, 16))
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(a, popxl.float16, "a")
        w = popxl.variable(b, popxl.float16, "b")
        y = ops.gelu(x @ w) @ ops.transpose(w)  # into pool buffers, then a transposed view
        s = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(s, y)
    with popxl.Session(ir, backend=backend, compile_in_background=False) as session:
        got = session.run({})[s]
    want = matmul_out(session_gelu(matmul_out(a, b)), np.ascontiguousarray(b.T))
    np.testing.assert_array_equal(got, want)


def session_gelu(x: np.ndarray) -> np.ndarray:
    ir = popxl.Ir()
    with ir.main_graph:
        y = ops.gelu(popxl.variable(x, popxl.float16, "x"))
        s = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(s, y)
    with popxl.Session(ir, backend="numpy") as session:
        return session.run({})[s]


@pytest.mark.parametrize("replicas", [1, 2, 4])
def test_replicas_multiply_their_own_rows_alike(replicas: int) -> None:
    a, b = half_operands((replicas, 6, 32), (32, 5))
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        x_s = popxl.h2d_stream((6, 32), popxl.float16, "x")
        w = popxl.variable(b, popxl.float16, "w")  # one value, held once
        y = ops.host_load(x_s) @ w
        s = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(s, y)
    with popxl.Session(ir) as session:
        got = session.run({x_s: a if replicas > 1 else a[0]})[s]
    want = np.stack([matmul_out(a[r], b) for r in range(replicas)])
    np.testing.assert_array_equal(got.reshape(want.shape), want)
