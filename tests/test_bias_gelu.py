"""A bias add and the GELU of its sum in one loop (``xlgraph.lower.bias_gelu``,
``xlgraph.ops.bias_gelu``): the loop against the two compiled loops it joins, bit for bit, and
programs on the compiled backend against the interpreter, where the pair applies (in a subgraph
too) and where it does not."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops
from xlgraph.lower.backends import TOLERANCE

pytest.importorskip("numba", reason="needs the fast extra")
F32 = popxl.float32


def test_the_loop_gives_the_add_and_gelu_loops_bits() -> None:
    """A bias over rows and a same-shaped operand, the sum written over ``x`` or apart, NaN,
    infinities, -0.0 and large values: the sum is ``add_rows``'s and the GELU ``gelu32``'s."""
    from xlgraph.lower.backends.numba_backend import NumbaBackend
    from xlgraph.ops import bias_gelu, loops

    backend = NumbaBackend()
    fused, add = backend.jitted(bias_gelu.bias_gelu32), backend.jitted(loops.add_rows)
    gelu = backend.jitted(loops.gelu32)
    rng = np.random.default_rng(4)
    for xshape, yshape in (((9, 3072), (3072,)), ((2, 5, 37), (1, 5, 37)), ((6, 40), (6, 40))):
        x = (rng.normal(size=xshape) * 5).astype(np.float32)
        x.reshape(-1)[:6] = (np.nan, np.inf, -np.inf, -0.0, 200.0, -200.0)
        y = rng.normal(size=yshape).astype(np.float32)
        fn, extra = bias_gelu.bias_gelu_loop([popxl.TensorSpec(xshape, F32),
                                              popxl.TensorSpec(yshape, F32)])
        assert fn is bias_gelu.bias_gelu32
        want_h, want = np.empty_like(x), np.empty_like(x)
        add(x, y, want_h)
        gelu(want_h, want, *extra)
        h, out = np.empty_like(x), np.empty_like(x)
        fused(x, y, h, out, *extra)
        assert h.tobytes() == want_h.tobytes() and out.tobytes() == want.tobytes()
        same = x.copy()
        fused(same, y, same, out, *extra)
        assert same.tobytes() == want_h.tobytes() and out.tobytes() == want.tobytes()


def test_other_dtypes_and_broadcasts_have_no_loop() -> None:
    from xlgraph.ops import bias_gelu

    def spec(shape, dtype=F32):  # noqa: ANN001, ANN202
        return popxl.TensorSpec(shape, dtype)

    f64 = popxl.float64
    assert bias_gelu.bias_gelu_loop([spec((4, 8), f64), spec((8,), f64)]) is None
    assert bias_gelu.bias_gelu_loop([spec((4, 8)), spec((4, 1))]) is None  # a column
    assert bias_gelu.bias_gelu_loop([spec((4, 8)), spec((8,))]) is not None


def _program(in_subgraph: bool, sum_dies: bool, dtype=F32):  # noqa: ANN001, ANN202
    """``y = gelu(x @ w + b)``, then ``y * h`` (the sum read again) unless ``sum_dies``; in a
    subgraph or not."""
    ir = popxl.Ir()
    rng = np.random.default_rng(1)
    with ir.main_graph, popxl.in_sequence():
        w = popxl.variable(rng.normal(size=(24, 40)) / 5, dtype, "w")
        b = popxl.variable(rng.normal(size=(40,)), dtype, "b")
        xs = popxl.h2d_stream((6, 24), dtype, "x")

        def block(x, wt, bias):  # noqa: ANN001, ANN202
            h = x @ wt + bias
            y = ops.gelu(h)
            return y if sum_dies else y * h

        args = (ops.host_load(xs), w, b)
        if in_subgraph:
            graph = ir.create_graph(block, popxl.TensorSpec((6, 24), dtype), w.spec, b.spec)
            out, = ops.call(graph, *args)
        else:
            out = block(*args)
        stream = popxl.d2h_stream(out.shape, out.dtype, "out")
        ops.host_store(stream, out)
    return ir, xs, stream


@pytest.mark.parametrize(("in_subgraph", "sum_dies", "dtype", "fused"),
                         [(False, False, F32, True), (True, False, F32, True),
                          (False, True, F32, True), (True, False, popxl.float64, False)])
def test_programs_match_the_interpreter(in_subgraph: bool, sum_dies: bool, dtype, fused: bool,  # noqa: ANN001
                                        ) -> None:
    """The pair runs as one loop for float32 (the sum read later or not), in a subgraph too;
    float64 runs the two steps; the results are the interpreter's either way."""
    data = np.random.default_rng(2).normal(size=(6, 24)) * 3
    got = {}
    for backend in ("numba", "numpy"):
        ir, xs, stream = _program(in_subgraph, sum_dies, dtype)
        session = popxl.Session(ir, backend=backend, compile_in_background=False)
        if backend == "numba":
            assert ("j_bias_gelu(" in session.source) == fused
            assert ("j_gelu(" in session.source) != fused
        with session:
            got[backend] = session.run({xs: data.astype(dtype.as_numpy())})[stream]
    np.testing.assert_allclose(got["numba"], got["numpy"], **TOLERANCE[dtype.name])
