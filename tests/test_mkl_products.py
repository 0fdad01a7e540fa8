"""MKL's products (``xlgraph.ops.mkl``): values against a float64 reference, the operand layouts
BLAS takes as they lie, numpy for everything else, the same bits whichever backend runs them,
``XLGRAPH_BLAS`` and its errors, and numpy's products without the extra."""

from __future__ import annotations

import os

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops
from xlgraph.lower import segments
from xlgraph.ops import mkl
from xlgraph.ops.matmul_kernel import matmul_out

needs_mkl = pytest.mark.skipif(mkl._library_path() is None, reason="needs the mkl extra")
RNG = np.random.default_rng(48)


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """``mkl.library`` chosen again under this test's environment, and again after it."""
    assert segments.FUSED_MATMUL_MAX < 1 << 22 <= mkl.MIN_PRODUCT  # segments: never on MKL
    monkeypatch.delenv(mkl.ENV, raising=False)
    monkeypatch.setattr(mkl, "MIN_PRODUCT", 1 << 22)  # smaller products: faster tests, same rule
    mkl.library.cache_clear()
    yield monkeypatch
    monkeypatch.undo()
    mkl.library.cache_clear()


def _matrix(shape: tuple[int, ...], dtype: type, order: str = "C") -> np.ndarray:
    return np.asarray(RNG.standard_normal(shape), dtype=dtype, order=order)


def _product_ir(a: np.ndarray, b: np.ndarray) -> tuple[popxl.Ir, object]:
    """A program storing ``a @ b`` of two variables, and its stream."""
    ir = popxl.Ir()
    with ir.main_graph:
        y = ops.matmul(popxl.variable(a), popxl.variable(b))
        d2h = popxl.d2h_stream(y.shape, y.dtype)
        ops.host_store(d2h, y)
    return ir, d2h


def _reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


def _check(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """MKL takes ``a @ b`` and matches the float64 product to the dtype's rounding."""
    found = mkl.matmul(a, b, out)
    assert found is not None and (out is None or found is out)
    k = a.shape[-1]
    eps = np.finfo(a.dtype).eps
    np.testing.assert_allclose(found, _reference(a, b), rtol=0, atol=2 * eps * k)
    return found


@needs_mkl
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_products_of_every_layout_match_the_float64_reference(fresh: pytest.MonkeyPatch,
                                                              dtype: type) -> None:
    m, k, n = 96, 211, 257  # >= MIN_PRODUCT multiply-adds, odd sizes
    assert m * k * n >= mkl.MIN_PRODUCT
    a, b = _matrix((m, k), dtype), _matrix((k, n), dtype)
    plain = _check(a, b)
    for a2 in (a, np.asfortranarray(a), _matrix((k, m), dtype).T):  # C, F, a transposed view
        for b2 in (b, np.asfortranarray(b), _matrix((n, k), dtype).T):
            _check(a2, b2)
    assert np.array_equal(_check(np.asfortranarray(a), np.asfortranarray(b)), plain)  # same bits
    wide = _matrix((m, k + 9), dtype)  # rows with a leading dimension past the columns
    _check(wide[:, 3:3 + k], b)
    out = np.zeros((m, n + 5), dtype)
    _check(a, b, out[:, 2:2 + n])  # into a view of a larger buffer
    assert not out[:, :2].any() and not out[:, 2 + n:].any()
    assert np.array_equal(matmul_out(a, b), plain)  # the op's kernel takes the same path


@needs_mkl
def test_batched_products_broadcast_as_numpy_one_gemm_per_matrix(fresh: pytest.MonkeyPatch) -> None:
    a, b = _matrix((2, 3, 64, 256), np.float32), _matrix((3, 256, 300), np.float32)
    found = _check(a, b)  # b broadcasts over a's first axis
    assert found.shape == np.matmul(a, b).shape
    for i in range(2):
        for j in range(3):
            assert np.array_equal(found[i, j], mkl.matmul(a[i, j], b[j], None))
    w = _matrix((256, 300), np.float32)
    assert np.array_equal(_check(a, w)[1, 2], mkl.matmul(a[1, 2], w, None))
    heads = _matrix((2, 64, 3, 256), np.float32).transpose(0, 2, 1, 3)  # attention's heads
    _check(heads, b)


@needs_mkl
def test_products_mkl_leaves_to_numpy(fresh: pytest.MonkeyPatch) -> None:
    """Small, vector-like, strided, mixed, float16, zero-size and aliased products stay numpy's
    (``mkl.matmul`` writes nothing) and the kernel gives numpy's bits."""
    a, b = _matrix((128, 256), np.float32), _matrix((256, 256), np.float32)
    square = _matrix((256, 256), np.float32)
    cases = [
        (a[:8], b[:, :8]),  # below MIN_PRODUCT
        (_matrix((1, 4096), np.float32), _matrix((4096, 1024), np.float32)),  # one row: gemv
        (_matrix((128, 512), np.float32)[:, ::2], b),  # no unit stride
        (a, b.astype(np.float64)),  # mixed dtypes
        (a.astype(np.int64), b.astype(np.int64)),
        (_matrix((512, 0), np.float32), _matrix((0, 512), np.float32)),
        (_matrix((0, 64, 256), np.float32), _matrix((1, 256, 300), np.float32)),  # no matrix
    ]
    assert mkl.matmul(a.astype(np.float16), b.astype(np.float16), None) is None
    for x, y in cases:
        assert mkl.matmul(x, y, None) is None
        expected = np.matmul(x, y)
        assert np.array_equal(matmul_out(x, y), expected)
    assert mkl.matmul(square, square, square) is None  # out is an input: numpy buffers it
    expected = np.matmul(square, square)
    assert np.array_equal(matmul_out(square, square, square), expected)
    assert mkl.matmul(a, b, np.empty((128, 256), np.float32)[:, ::-1]) is None  # stride < 0
    raw = np.empty(4 * 128 * 256 + 1, np.uint8)[1:].view(np.float32).reshape(128, 256)
    assert not raw.flags.aligned and mkl.matmul(a, b, raw) is None  # numpy copes, BLAS need not


@needs_mkl
def test_a_session_multiplies_the_same_bits_on_every_backend(fresh: pytest.MonkeyPatch) -> None:
    """A large product (MKL) gives the same bits on both backends, and a small one fused in a
    segment of the numba backend (numpy's gemm) the same bits as its own line."""
    x_data, w_data = _matrix((128, 192), np.float32), _matrix((192, 256), np.float32)
    v_data = _matrix((256, 16), np.float32)
    found = {}
    for backend, fuse in (("numpy", False), ("numba", False), ("numba", True)):
        ir = popxl.Ir()
        with ir.main_graph:
            x = popxl.variable(x_data)
            w, v = popxl.variable(w_data), popxl.variable(v_data)
            h = ops.matmul(x, w)
            y = ops.softmax(ops.matmul(ops.gelu(h), v), axis=1)
            streams = [popxl.d2h_stream(t.shape, t.dtype) for t in (h, y)]
            for stream, t in zip(streams, (h, y)):
                ops.host_store(stream, t)
        session = popxl.Session(ir, backend=backend, compile_in_background=False,
                                fuse_steps=fuse)
        assert ("fused:" in session.source) == fuse
        with session:
            outputs = session.run()
        found[backend, fuse] = [outputs[s] for s in streams]
    hidden = mkl.matmul(x_data, w_data, None)
    assert hidden is not None
    for h_found, _ in found.values():
        assert np.array_equal(h_found, hidden)
    assert np.array_equal(found["numba", True][1], found["numba", False][1])
    np.testing.assert_allclose(found["numba", True][1], found["numpy", False][1], rtol=1e-5,
                               atol=1e-6)


_BESIDE_TORCH = """
import sys
import numpy as np
import torch
from threadpoolctl import threadpool_limits
from xlgraph.ops import mkl

torch.ones(4, 4) @ torch.ones(4, 4)  # torch's BLAS and OpenMP runtime in use
rng = np.random.default_rng(48)
a = rng.standard_normal((64, 3072), np.float32)
b = rng.standard_normal((3072, 768), np.float32)
exact = a.astype(np.float64) @ b.astype(np.float64)
errors = []
for count in (1, 2, 2):
    with threadpool_limits(limits=count):
        found = mkl.matmul(a, b, None)
        errors.append(float(np.abs(found - exact).max()))
print(errors)
sys.exit(int(max(errors) > 2 * np.finfo(np.float32).eps * 3072))
"""


@needs_mkl
def test_products_are_right_beside_torch_on_two_threads() -> None:
    """MKL's Intel OpenMP layer gave products off by about 150 on two threads once torch (its own
    OpenMP runtime) was loaded in the process; MKL now runs sequentially. A fresh process, as
    MKL's threading layer is chosen once per process."""
    pytest.importorskip("torch")
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop(mkl.ENV, None)
    done = subprocess.run([sys.executable, "-c", _BESIDE_TORCH], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


@needs_mkl
@pytest.mark.parametrize("shape", [(64, 3072, 768), (8, 4096, 4096), (256, 8192, 256)])
def test_a_product_has_the_same_bits_at_every_thread_count(fresh: pytest.MonkeyPatch,
                                                           shape: tuple[int, int, int]) -> None:
    """Long contractions that MKL on two threads splits (other bits than on one for these
    shapes) give one thread's bits whatever the BLAS libraries' thread limits (MKL's too), so
    that a Session's results do not follow the thread count its policy picks."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    m, k, n = shape
    a, b = _matrix((m, k), np.float32), _matrix((k, n), np.float32)
    found = [_check(a, b)]  # MKL loaded: the limits below reach it too
    for count in (2, 1, 2):
        with threadpoolctl.threadpool_limits(limits=count):
            found.append(_check(a, b))
    for other in found[1:]:
        assert np.array_equal(other, found[0])


def test_xlgraph_blas_chooses_and_refuses_other_values(fresh: pytest.MonkeyPatch) -> None:
    fresh.setenv(mkl.ENV, "openblas")
    assert mkl.library() is None
    a, b = _matrix((64, 256), np.float32), _matrix((256, 256), np.float32)
    assert mkl.matmul(a, b, None) is None
    assert np.array_equal(matmul_out(a, b), np.matmul(a, b))
    fresh.setenv(mkl.ENV, "MKL")
    mkl.library.cache_clear()
    with pytest.raises(ValueError, match=r"^environment variable XLGRAPH_BLAS='MKL' is not"):
        mkl.check()
    with pytest.raises(ValueError, match="XLGRAPH_BLAS"):
        popxl.Session(_product_ir(a, b)[0])  # when the Session is made, not in its first run


def test_without_the_extra_products_are_numpy(fresh: pytest.MonkeyPatch) -> None:
    fresh.setattr(mkl, "_library_path", lambda: None)
    a, b = _matrix((64, 256), np.float32), _matrix((256, 256), np.float32)
    assert mkl.library() is None and mkl.matmul(a, b, None) is None
    assert np.array_equal(matmul_out(a, b), np.matmul(a, b))
    ir, d2h = _product_ir(a, b)
    with popxl.Session(ir, backend="numpy") as session:
        assert np.array_equal(session.run()[d2h], np.matmul(a, b))
    fresh.setenv(mkl.ENV, "mkl")
    mkl.library.cache_clear()
    with pytest.raises(ImportError, match=r"^XLGRAPH_BLAS=mkl needs Intel MKL: pip install "
                                          r"xlgraph\[mkl\]$"):
        popxl.Session(ir)


def test_import_xlgraph_does_not_load_mkl() -> None:
    import subprocess
    import sys

    code = ("import xlgraph, sys; maps = open('/proc/self/maps').read(); "
            "sys.exit('libmkl' in maps)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    assert subprocess.run([sys.executable, "-c", code], env=env).returncode == 0
