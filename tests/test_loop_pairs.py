"""Two ops in one loop (``xlgraph.lower.loop_pairs``, ``xlgraph.ops.pair_loops``): a bias add
and the GELU of its sum, the GELU's gradient and its sum over rows. Each loop against the two
compiled loops it joins, bit for bit, and programs on the compiled backend against the
interpreter, where the pairs apply (in a subgraph too) and where they do not."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops
from xlgraph.lower.backends import TOLERANCE
from xlgraph.ops.elementwise import gelu_grad

pytest.importorskip("numba", reason="needs the fast extra")
F32 = popxl.float32


@pytest.fixture(scope="module")
def backend():  # noqa: ANN201
    from xlgraph.lower.backends.numba_backend import NumbaBackend

    return NumbaBackend()


def _data(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Normal draws times 5 with NaN, infinities, -0.0 and large values first."""
    x = (rng.normal(size=shape) * 5).astype(np.float32)
    x.reshape(-1)[:6] = (np.nan, np.inf, -np.inf, -0.0, 200.0, -200.0)
    return x


def _loop(first: str, second: str, ins: list[tuple[int, ...]], **attrs):  # noqa: ANN003, ANN202
    from xlgraph.ops.pair_loops import PAIRS

    return PAIRS[first, second]([popxl.TensorSpec(s, F32) for s in ins], **attrs)


def test_bias_gelu_gives_the_add_and_gelu_loops_bits(backend) -> None:  # noqa: ANN001
    """A bias over rows and a same-shaped operand, the sum written over ``x`` or apart: the
    sum is ``add_rows``'s and the GELU ``gelu32``'s."""
    from xlgraph.ops import loops, pair_loops

    fused = backend.jitted(pair_loops.bias_gelu32)
    add, gelu = backend.jitted(loops.add_rows), backend.jitted(loops.gelu32)
    rng = np.random.default_rng(4)
    for xshape, yshape in (((9, 3072), (3072,)), ((2, 5, 37), (1, 5, 37)), ((6, 40), (6, 40))):
        x, y = _data(rng, xshape), rng.normal(size=yshape).astype(np.float32)
        fn, extra = _loop("add", "gelu", [xshape, yshape])
        assert fn is pair_loops.bias_gelu32
        want_h, want = np.empty_like(x), np.empty_like(x)
        add(x, y, want_h)
        gelu(want_h, want, *extra)
        h, out = np.empty_like(x), np.empty_like(x)
        fused(x, y, h, out, *extra)
        assert h.tobytes() == want_h.tobytes() and out.tobytes() == want.tobytes()
        same = x.copy()
        fused(same, y, same, out, *extra)
        assert same.tobytes() == want_h.tobytes() and out.tobytes() == want.tobytes()


def test_gelu_grad_sum_gives_the_gradient_and_sum_loops_bits(backend) -> None:  # noqa: ANN001
    """Sums over the first axis and over the first two: the gradient is ``gelu_grad32``'s
    and the sum ``sum_leading``'s."""
    from xlgraph.ops import loops, pair_loops

    fused = backend.jitted(pair_loops.gelu_grad_sum32)
    grad, total = backend.jitted(loops.gelu_grad32), backend.jitted(loops.sum_leading)
    rng = np.random.default_rng(5)
    for shape, axis, kept in (((9, 3072), (0,), (1, 3072)), ((3, 4, 37), (0, 1), (37,))):
        x, dy = _data(rng, shape), rng.normal(size=shape).astype(np.float32)
        fn, extra = _loop("gelu_grad", "sum", [shape, shape], axis=axis,
                          keepdims=len(kept) == len(shape))
        assert fn is pair_loops.gelu_grad_sum32
        want, want_total = np.empty_like(x), np.empty(kept, np.float32)
        grad(dy, x, want, *extra[:-1])
        total(want, want_total, extra[-1])
        out, got_total = np.empty_like(x), np.empty(kept, np.float32)
        fused(dy, x, out, got_total, *extra)
        assert out.tobytes() == want.tobytes() and got_total.tobytes() == want_total.tobytes()


def test_other_dtypes_broadcasts_and_axes_have_no_loop() -> None:
    def spec(shape, dtype=F32):  # noqa: ANN001, ANN202
        return popxl.TensorSpec(shape, dtype)

    from xlgraph.ops.pair_loops import PAIRS

    bias_gelu, grad_sum = PAIRS["add", "gelu"], PAIRS["gelu_grad", "sum"]
    f64 = popxl.float64
    assert bias_gelu([spec((4, 8), f64), spec((8,), f64)]) is None
    assert bias_gelu([spec((4, 8)), spec((4, 1))]) is None  # a column
    assert bias_gelu([spec((4, 8)), spec((8,))]) is not None
    assert grad_sum([spec((4, 8), f64)] * 2, axis=(0,), keepdims=True) is None
    assert grad_sum([spec((4, 8))] * 2, axis=(1,), keepdims=True) is None  # the last axis
    assert grad_sum([spec((4, 8))] * 2, axis=(0,), keepdims=False) is not None


def _program(in_subgraph: bool, sum_dies: bool, dtype=F32, replicas: int = 1):  # noqa: ANN001, ANN202
    """``y = gelu(x @ w + b)``, then ``y * h`` (the sum read again) unless ``sum_dies``, and
    ``db = sum(gelu_grad(dy, h), axis=0)``; in a subgraph or not; over ``replicas``."""
    ir = popxl.Ir()
    ir.replication_factor = replicas
    rng = np.random.default_rng(1)
    with ir.main_graph, popxl.in_sequence():
        w = popxl.variable(rng.normal(size=(24, 40)) / 5, dtype, "w")
        b = popxl.variable(rng.normal(size=(40,)), dtype, "b")
        xs = popxl.h2d_stream((6, 24), dtype, "x")

        def block(x, wt, bias):  # noqa: ANN001, ANN202
            h = x @ wt + bias
            y = ops.gelu(h)
            g = gelu_grad(y @ ops.transpose(wt) @ wt, h)  # as autodiff writes it
            db = ops.sum(g, axis=0, keepdims=True)
            return y if sum_dies else y * h, db, g * 2.0

        args = (ops.host_load(xs), w, b)
        graph = ir.create_graph(block, popxl.TensorSpec((6, 24), dtype), w.spec, b.spec)
        streams = []
        for t in ops.call(graph, *args) if in_subgraph else block(*args):
            streams.append(popxl.d2h_stream(t.shape, t.dtype, f"out{len(streams)}"))
            ops.host_store(streams[-1], t)
    return ir, xs, streams


@pytest.mark.parametrize(("in_subgraph", "sum_dies", "dtype", "fused"),
                         [(False, False, F32, True), (True, False, F32, True),
                          (False, True, F32, True), (True, False, popxl.float64, False)])
def test_programs_match_the_interpreter(in_subgraph: bool, sum_dies: bool, dtype, fused: bool,  # noqa: ANN001
                                        ) -> None:
    """Both pairs run as one loop each for float32 (the sum read later or not), in a subgraph
    too; float64 runs the steps; the results are the interpreter's either way."""
    data = np.random.default_rng(2).normal(size=(6, 24)) * 3
    got = {}
    for backend in ("numba", "numpy"):
        ir, xs, streams = _program(in_subgraph, sum_dies, dtype)
        session = popxl.Session(ir, backend=backend, compile_in_background=False)
        if backend == "numba":
            for pair, alone in (("bias_gelu", "gelu"), ("gelu_grad_sum", "gelu_grad")):
                assert (f"j_{pair}(" in session.source) == fused
                assert (f"j_{alone}(" in session.source) != fused
        with session:
            out = session.run({xs: data.astype(dtype.as_numpy())})
        got[backend] = [out[s] for s in streams]
    for a, b in zip(got["numba"], got["numpy"]):
        np.testing.assert_allclose(a, b, **TOLERANCE[dtype.name])


def test_replicated_programs_match_the_interpreter() -> None:
    """Over two replicas (the values carry a replica axis) each replica's gradient is summed
    over its own rows, as the interpreter sums them (a pair loop once summed over the
    replicas: a replicated GPT's bias gradients went wrong)."""
    data = np.random.default_rng(3).normal(size=(2, 6, 24)) * 3
    got = {}
    for backend in ("numba", "numpy"):
        ir, xs, streams = _program(False, False, F32, replicas=2)
        with popxl.Session(ir, backend=backend, compile_in_background=False) as session:
            out = session.run({xs: data.astype(np.float32)})
        got[backend] = [out[s] for s in streams]
    for a, b in zip(got["numba"], got["numpy"]):
        np.testing.assert_allclose(a, b, **TOLERANCE["float32"])
