"""The transformer step's loop forms (issue 35): the float32 softmax rows loop and the softmax
gradient, LayerNorm and its gradient, the embedding's gradient, and the Adam step's moving
averages and update term, against the numpy kernels; and the decoder's training step running
them on the compiled backend."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from xlgraph.lower.backends import TOLERANCE

pytest.importorskip("numba", reason="needs the fast extra")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


@pytest.fixture(scope="module")
def backend():  # noqa: ANN201
    from xlgraph.lower.backends.numba_backend import NumbaBackend

    return NumbaBackend()


def test_float32_softmax_rows_loop_matches_numpy_with_masks_and_edges(backend) -> None:  # noqa: ANN001
    """Rows of 8192 (the logits), 50257 (GPT-2's) and 13 (not a multiple of the eight
    partial sums and maxima), masked entries (-30000, -inf: exactly 0), a NaN row (stays NaN),
    in place and not."""
    from xlgraph.ops import nn, softmax_loops

    rng = np.random.default_rng(5)
    fn = backend.jitted(softmax_loops.softmax_rows32)
    for shape in ((6, 8192), (4, 50257), (3, 4, 13)):
        x = (rng.normal(size=shape) * 6).astype(np.float32)
        x[..., 2, :][..., :3] = -30000
        x[..., 1, :][..., -2:] = -np.inf
        x.reshape(-1, shape[-1])[-1, 4] = np.nan
        want = nn._softmax(x, x.ndim - 1)
        got = np.empty_like(x)
        fn(x, got)
        np.testing.assert_allclose(got, want, **TOLERANCE["float32"])
        assert np.all(got[..., 2, :][..., :3] == 0) and np.all(got[..., 1, :][..., -2:] == 0)
        assert np.isnan(got.reshape(-1, shape[-1])[-1]).all()
        fn(x, x)
        assert np.array_equal(x, got, equal_nan=True)


def test_row_max_is_numpys_max_for_every_row_length(backend) -> None:  # noqa: ANN001
    """Eight running maxima give the row's maximum exactly, whatever the length and wherever
    the maximum is (first, last, in the tail after the multiples of eight)."""
    from xlgraph.ops import softmax_loops

    fn = backend.jitted(softmax_loops.row_max)
    rng = np.random.default_rng(9)
    for n in range(1, 21):
        x = rng.normal(size=n).astype(np.float32)
        for where in range(n):
            y = x.copy()
            y[where] = 50.0
            assert fn(y) == np.max(y) == 50.0
        assert fn(-np.abs(x)) == np.max(-np.abs(x))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_vector_lanes_give_the_python_forms_sums_and_maxima(backend, dtype: type) -> None:  # noqa: ANN001
    """The compiled sixteen running sums and maxima (``backends.numba_lanes``) against their
    Python forms, bit for bit: rows shorter than 16, of whole and partial vectors, GPT-2's
    vocabulary; the largest value in each lane; a NaN row sums to NaN."""
    from xlgraph.ops import softmax_loops

    run_sum16, row_max = (backend.jitted(f) for f in (softmax_loops.run_sum16,
                                                      softmax_loops.row_max))
    rng = np.random.default_rng(10)
    for n in [*range(1, 40), 64, 129, 1024, 8192, 50257]:
        x = (rng.normal(size=n) * 3).astype(dtype)
        assert run_sum16(x) == softmax_loops.run_sum16(x)  # float32: boxed exactly
        assert row_max(x) == softmax_loops.row_max(x) == np.max(x)
    x = rng.normal(size=48).astype(dtype)
    for lane in range(48):
        y = x.copy()
        y[lane] = 40.0
        assert row_max(y) == 40.0
    x[17] = np.nan
    assert np.isnan(run_sum16(x)) and np.isnan(softmax_loops.run_sum16(x))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm_loops_give_the_numpy_kernels_bits(backend, dtype: type) -> None:  # noqa: ANN001
    """Rows shorter than eight, of one run (up to 128), split once (into unequal halves, into
    equal halves of whole vectors: summed side by side) and more often (GPT-2's 768, 3072), in
    2-d and 3-d data: numpy's pairwise sums, so its bits."""
    from xlgraph.ops import loops, norm

    rng = np.random.default_rng(6)
    for shape in [(3, 1), (5, 7), (2, 37, 19), (6, 128), (3, 129), (3, 144), (4, 255), (5, 256),
                  (2, 300), (2, 16, 768), (2, 3072)]:
        x = (rng.normal(size=shape) * 3 + 1).astype(dtype)
        w, b = rng.normal(size=(2, shape[-1])).astype(dtype)
        dy = rng.normal(size=x.shape).astype(dtype)
        consts = (dtype(1e-5), dtype(1), dtype(shape[-1]))
        y = np.empty_like(x)
        backend.jitted(loops.layer_norm)(x, w, b, y, *consts)
        assert y.tobytes() == norm._layer_norm(x, w, b, 1e-5).tobytes(), shape
        grads = np.empty_like(x), np.empty_like(w), np.empty_like(w)
        backend.jitted(loops.layer_norm_grad)(dy, x, w, *grads, *consts)
        for got, want in zip(grads, norm._layer_norm_grad(dy, x, w, 1e-5)):
            assert got.tobytes() == want.tobytes(), shape


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_sum_is_numpys_pairwise_sum(backend, dtype: type) -> None:  # noqa: ANN001
    """``pairwise.row_sum`` against ``np.add.reduce`` along rows of every length to 1100 and a
    few long ones, values over many magnitudes, infinities, rows of -0.0 (numpy gives +0.0),
    at offsets into a longer array."""
    import numba

    from xlgraph.ops import loops, pairwise

    @numba.njit
    def sums(x, out, pending):  # noqa: ANN001, ANN202
        n = x.shape[1]
        flat, plan = x.reshape(-1), pairwise.sum_plan(n)
        for r in range(x.shape[0]):
            out[r] = pairwise.row_sum(flat, r * n, plan, pending)

    backend.jitted(loops.layer_norm)  # a loop's dispatcher: numba now knows the helpers
    rng = np.random.default_rng(9)
    pending = np.empty(pairwise.STACK, dtype)
    for n in [*range(1, 1101), 3072, 50257, 300001]:
        rows = 2 if n < 2000 else 1
        x = (rng.normal(size=(rows, n)) * 10.0 ** rng.integers(-4, 4, (rows, n))).astype(dtype)
        if n % 97 == 0:
            x[0, n // 3] = np.inf
        out = np.empty(rows, dtype)
        sums(x, out, pending)
        assert out.tobytes() == np.add.reduce(x, axis=-1).tobytes(), n
    for n in (3, 8, 200):
        x, out = np.full((1, n), -0.0, dtype), np.empty(1, dtype)
        sums(x, out, pending)
        assert out.tobytes() == np.add.reduce(x, axis=-1).tobytes() == np.zeros(1, dtype).tobytes()


def test_embedding_gradient_loop_adds_rows_as_add_at(backend) -> None:  # noqa: ANN001
    """Repeated, negative and out-of-range indices: numpy's ``np.add.at`` bits (with
    ``zero_OOR`` the negative ones are dropped)."""
    from xlgraph.ops import indexing, loops

    rng = np.random.default_rng(8)
    idx = np.concatenate([rng.integers(-50, 50, 300), [60, -61, 3, 3]]).astype(np.int32)
    dy = rng.normal(size=(idx.size, 7)).astype(np.float32)
    for zero_oor in (False, True):
        got = np.full((50, 7), np.nan, np.float32)
        backend.jitted(loops.gather_grad_rows)(dy, idx, got, int(zero_oor))
        want = indexing._gather_grad(dy, idx, (50, 7), 0, zero_oor)
        assert got.tobytes() == want.tobytes()
    np.testing.assert_array_equal(want, [dy[idx == k].sum(0) for k in range(50)])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_add_rows_gives_numpys_bits_in_place_or_not(backend, dtype: type) -> None:  # noqa: ANN001
    """A bias over rows, a row block and same-shaped operands, into a fresh array, over the
    first operand and over the second (same shapes): ``np.add``'s bits, NaN, inf and -0.0
    included."""
    from xlgraph.ops import loops

    fn = backend.jitted(loops.add_rows)
    rng = np.random.default_rng(11)
    for xshape, yshape in (((5, 37), (37,)), ((3, 4, 13), (1, 4, 13)), ((7, 9), (7, 9)),
                           ((2, 3, 8), (2, 3, 8))):
        x = rng.normal(size=xshape).astype(dtype)
        y = rng.normal(size=yshape).astype(dtype)
        x.reshape(-1)[:3] = (np.nan, -0.0, np.inf)
        y.reshape(-1)[1:3] = (-0.0, -np.inf)
        want = np.add(x, y)
        out = np.empty_like(x)
        fn(x, y, out)
        assert out.tobytes() == want.tobytes()
        first = x.copy()
        fn(first, y, first)
        assert first.tobytes() == want.tobytes()
        if yshape == xshape:
            second = y.copy()
            fn(x, second, second)
            assert second.tobytes() == want.tobytes()


def test_float32_gelu_loops_fuse_multiply_adds_within_the_tolerance(backend) -> None:  # noqa: ANN001
    """The float32 GELU and its gradient compile with contracted multiply-adds (their loops
    say so), and stay within the backend's tolerance of the numpy kernels over a wide range,
    NaN and infinities included."""
    import xlgraph as popxl
    from xlgraph.core.op import REGISTRY
    from xlgraph.ops import elementwise, loops

    rng = np.random.default_rng(12)
    x = (rng.normal(size=(64, 3072)) * 4).astype(np.float32)
    x[0, :5] = (np.nan, np.inf, -np.inf, 0.0, -90.0)
    dy = rng.normal(size=x.shape).astype(np.float32)
    spec = popxl.TensorSpec(x.shape, popxl.float32)
    with np.errstate(invalid="ignore"):  # inf * 0 in numpy's gradient
        wants = elementwise._gelu(x), elementwise._gelu_grad(dy, x)
    for name, arrays, want in (("gelu", (x,), wants[0]), ("gelu_grad", (dy, x), wants[1])):
        fn, extra = REGISTRY[name].loop([spec] * len(arrays))
        assert fn in (loops.gelu32, loops.gelu_grad32) and fn.contract
        compiled = backend.jitted(fn)
        assert compiled.targetoptions["fastmath"]
        got = np.empty_like(x)
        compiled(*arrays, got, *extra)
        np.testing.assert_allclose(got, want, **TOLERANCE["float32"])


def test_softmax_grad_rows_loop_matches_numpy(backend) -> None:  # noqa: ANN001
    from xlgraph.ops import nn, softmax_loops

    rng = np.random.default_rng(9)
    y = nn._softmax(rng.normal(size=(3, 5, 130)).astype(np.float32), 2)
    dy = rng.normal(size=y.shape).astype(np.float32)
    got = np.empty_like(y)
    backend.jitted(softmax_loops.softmax_grad_rows)(dy, y, got)
    np.testing.assert_allclose(got, nn._softmax_grad(dy, y, 2), **TOLERANCE["float32"])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_adam_loops_and_kernel_outs_give_the_kernels_bits(backend, dtype: type) -> None:  # noqa: ANN001
    """The update term (with and without weight decay) and both moving averages: the loops
    and the ``kernel_out``s do the numpy kernels' operations in their order and dtype."""
    from xlgraph.ops import adam_loops, optim_updates, var_updates

    rng = np.random.default_rng(7)
    m, w = rng.normal(size=(2, 33, 9)).astype(dtype)
    v = rng.uniform(1e-6, 2, m.shape).astype(dtype)
    step, wd, b1, b2, eps = (np.array(x, dtype) for x in (5.0, 0.01, 0.9, 0.999, 1e-8))
    got, scratch = np.empty_like(m), (np.empty_like(m),)
    for decay in (True, False):
        ins = (m, v, w, step, wd, b1, b2, eps) if decay else (m, v, step, b1, b2, eps)
        want = optim_updates._updater(*ins, mode="adam", decay=decay, bias=True)
        fn = adam_loops.adam_term_decay if decay else adam_loops.adam_term
        backend.jitted(fn)(*ins, got)
        assert got.tobytes() == want.tobytes()
        optim_updates._updater_out(*ins, out=got, scratch=scratch, mode="adam", decay=decay,
                                   bias=True)
        assert got.tobytes() == want.tobytes()
    f = np.array(0.95, dtype)
    for square, kernel in ((False, var_updates._moving_average),
                           (True, var_updates._moving_average_square)):
        want = kernel(v.copy(), m, f)
        fn = adam_loops.moving_average_square if square else adam_loops.moving_average
        backend.jitted(fn)(v, m, f, got)
        assert got.tobytes() == want.tobytes()
        var_updates._moving_average_out(square)(v, m, f, out=got, scratch=scratch)
        assert got.tobytes() == want.tobytes()
        t, want = v.copy(), v.copy()  # the updater being the accumulator itself
        var_updates._moving_average_out(square)(t, t, f, out=t, scratch=scratch)
        assert t.tobytes() == kernel(want, want, f).tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_adam_step_gives_the_four_kernels_bits(backend, dtype: type) -> None:  # noqa: ANN001
    """``adam_step`` (one Adam chain, ``lower.adam_chains``) against the numpy kernels of the
    moving averages, the updater and ``scaled_add_`` run in turn, with and without weight
    decay, into spare arrays and in place."""
    from xlgraph.ops import adam_loops, elementwise, optim_updates, var_updates

    rng = np.random.default_rng(8)
    g, m, w = rng.normal(size=(3, 17, 11)) * 10.0 ** rng.integers(-8, 3, (3, 17, 11))
    g, m, w = g.astype(dtype), m.astype(dtype), w.astype(dtype)
    v = rng.uniform(1e-9, 2, m.shape).astype(dtype)
    f1, f2, step, wd, b1, b2, eps = (np.array(x, dtype)
                                     for x in (0.9, 0.999, 3.0, 0.01, 0.9, 0.999, 1e-8))
    fn = backend.jitted(adam_loops.adam_step)
    for decay, in_place in ((True, False), (False, False), (True, True)):
        m2, v2 = var_updates._moving_average(m.copy(), g, f1), \
            var_updates._moving_average_square(v.copy(), g, f2)
        ins = (m2, v2, w, step, wd, b1, b2, eps) if decay else (m2, v2, step, b1, b2, eps)
        term = optim_updates._updater(*ins, mode="adam", decay=decay, bias=True)
        want = elementwise._scaled_add_inplace(w.copy(), term, 1.0, -1e-3)
        state = [m.copy(), v.copy(), w.copy()]
        outs = state if in_place else [np.empty_like(x) for x in state]
        fn(g, *state, f1, f2, step, wd if decay else eps, b1, b2, eps, *outs,
           dtype(1.0), dtype(-1e-3), int(decay), 0, 0)
        for got, expected in zip(outs, (m2, v2, want)):
            assert got.tobytes() == expected.tobytes(), (decay, in_place)


def test_the_decoder_step_runs_the_loop_forms() -> None:
    """The tiny decoder's training step on the compiled backend: LayerNorm, its gradient, the
    softmaxes and every Adam term run as compiled loops (the lowering knows the layouts of the
    residual stream and of the embeddings' gradients). Its losses against torch's and JAX's:
    ``tests/test_benchmark_transformer.py``."""
    import gpt_model as gm

    import xlgraph as popxl

    ir, _, _, _ = gm.build_train(gm.TINY, 2)
    src = popxl.Session(ir, backend="numba", compile_in_background=False,
                        fuse_steps=False).source
    for op in ("layer_norm", "layer_norm_grad", "scaled_softmax", "softmax_nll",
               "scaled_softmax_grad", "gather_grad_add", "adam_step"):
        assert f"j_{op}(" in src, op
    for op in ("layer_norm", "layer_norm_grad", "softmax", "softmax_grad", "gather_grad",
               "adam_updater", "accumulate_moving_average_", "accumulate_moving_average_square_"):
        assert f"o_{op}(" not in src, op
    assert src.count("j_adam_step") == len(gm.initial_weights(gm.TINY))  # one per weight
