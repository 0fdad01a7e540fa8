"""popxl-addons' custom ops that each replica computes on its own: rotary embedding,
grad_reduce_square_add, group-quantised decompression, linear_layout, the fp8 scales and the
dense-sparse product, against independent numpy formulations (float16 rounding where the
library computes in float16 or accumulates in float32), on the numpy and numba backends."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph
from tests.addons.replicas import BACKENDS, run
from xlgraph.addons import ops as addons_ops
from xlgraph.addons.ops.fp8_mse_scale import fp8_mse_scale
from xlgraph.addons.ops.grad_reduce_square_add import grad_reduce_square_add
from xlgraph.addons.ops.group_quantize_decompress import (
    group_quantize_compress_numpy,
    group_quantize_decompress,
    group_quantize_decompress_numpy,
)
from xlgraph.addons.ops.linear_layout import linear_layout
from xlgraph.addons.ops.rotary_pos_embed import (
    rotary_pos_embed,
    trig_table_constants,
    trig_tables,
)
from xlgraph.addons.ops.static_sparse_ops import dense_const_sparse_matmul, random_sparse


def _one(fwd, inputs, backend="numpy", seeds=None):
    """Run on one replica: outputs (and gradients) without the replica axis."""
    outs, grads = run(1, fwd, [a[None] for a in inputs],
                      None if seeds is None else lambda o: [s[None] for s in seeds], backend)
    return [o[0] for o in outs], [g[0] for g in grads]


# -- rotary ------------------------------------------------------------------------------------
def _rotary_reference(x, phi, rotary_dim):
    """Pairs (x_2i, x_2i+1) as complex numbers times exp(i phi[seq, i])."""
    pairs = x[..., :rotary_dim:2] + 1j * x[..., 1:rotary_dim:2]
    turned = pairs * np.exp(1j * phi)[None, :, None, :]
    out = x.copy()
    out[..., :rotary_dim:2], out[..., 1:rotary_dim:2] = turned.real, turned.imag
    return out


def test_trig_tables_follow_the_formula():
    sin, cos = trig_tables(5, 6, base=100)
    assert sin.shape == cos.shape == (5, 3) and sin.dtype == np.float32
    theta = np.array([100.0 ** (-2 * i / 6) for i in range(3)])
    np.testing.assert_allclose(sin, np.sin(np.outer(np.arange(5), theta)), rtol=1e-6)
    np.testing.assert_allclose(cos, np.cos(np.outer(np.arange(5), theta)), rtol=1e-6)
    assert trig_tables(3, 4, np_dtype="float16")[0].dtype == np.float16


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_trig_tables_computed_in_the_requested_dtype(dtype):
    """Every step in ``np_dtype`` as popxl-addons: angles rounded to that dtype before the
    sine, so long sequences differ from a float64 computation rounded at the end."""
    sin, cos = trig_tables(2048, 64, np_dtype=dtype)
    theta = (10000 ** (-np.arange(0, 64, 2).astype(dtype) / 64)).astype(dtype)
    phi = np.outer(np.arange(2048).astype(dtype), theta).astype(dtype)
    np.testing.assert_array_equal(sin, np.sin(phi))
    np.testing.assert_array_equal(cos, np.cos(phi))
    wide = np.sin(np.outer(np.arange(2048), 10000.0 ** (-np.arange(0, 64, 2) / 64)))
    assert np.abs(sin - wide.astype(dtype)).max() > 0
    ir = xlgraph.Ir()
    with ir.main_graph:
        const, _ = trig_table_constants(2048, 64, dtype=xlgraph.dtypes.of_array(sin))
    np.testing.assert_array_equal(const.data, sin)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rotary_dim", [None, 4])
def test_rotary_pos_embed_turns_pairs_by_position(backend, rotary_dim):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5, 3, 8))
    dim = rotary_dim or 8
    sin, cos = trig_tables(5, dim, np_dtype="float64")
    phi = np.outer(np.arange(5), 10000.0 ** (-2 * np.arange(dim // 2) / dim))
    seed = rng.normal(size=x.shape)
    (y,), (dx, _, _) = _one(lambda t, s, c: [rotary_pos_embed(t, s, c, rotary_dim)],
                            [x, sin, cos], backend, [seed])
    np.testing.assert_allclose(y, _rotary_reference(x, phi, dim), atol=1e-12)
    np.testing.assert_allclose(dx, _rotary_reference(seed, -phi, dim), atol=1e-12)
    if rotary_dim:
        np.testing.assert_array_equal(y[..., 4:], x[..., 4:])


def test_rotary_pos_embed_constants_and_errors():
    ir = xlgraph.Ir()
    with ir.main_graph:
        sin, cos = trig_table_constants(4, 6, dtype=xlgraph.float16)
        assert sin.dtype == xlgraph.float16 and sin.shape == (4, 3)
        t = xlgraph.constant(np.zeros((1, 4, 2, 6), np.float16))
        assert rotary_pos_embed(t, sin, cos).spec == t.spec
        with pytest.raises(xlgraph.errors.ShapeError, match="rotary_dim must be even"):
            rotary_pos_embed(t, sin, cos, 5)
        with pytest.raises(xlgraph.errors.ShapeError, match="rank 4"):
            rotary_pos_embed(t.reshape((4, 2, 6)), sin, cos)
        with pytest.raises(xlgraph.errors.ShapeError, match="sin must be"):
            rotary_pos_embed(t, *trig_table_constants(3, 6, dtype=xlgraph.float16))


# -- grad_reduce_square_add --------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_grad_reduce_square_add_sums_in_float32(backend):
    """float16 gradients whose squares overflow float16: summed in float32 and unscaled."""
    x = np.full((4, 8), 300.0, np.float16)  # 300^2 = 90000 > float16 max
    (got,), _ = _one(lambda t: [grad_reduce_square_add(t, 128.0)], [x], backend)
    assert got.dtype == np.float32 and got.shape == ()
    with np.errstate(over="ignore"):
        assert np.isinf(np.sum(x * x, dtype=np.float16))
    want = np.sum(x.astype(np.float32) ** 2) * np.float32(1 / 128.0 ** 2)
    assert got == pytest.approx(float(want), rel=1e-6)
    assert got == pytest.approx(32 * 300.0 ** 2 / 128.0 ** 2, rel=1e-6)


def test_grad_reduce_square_add_with_a_tensor_loss_scaling():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(5, 3)).astype(np.float32)
    (got,), _ = _one(lambda t, s: [grad_reduce_square_add(t, s)],
                     [x, np.array(4.0, np.float16)])
    assert got == pytest.approx(float(np.sum(x.astype(np.float64) ** 2) / 16), rel=1e-6)


# -- group_quantize_decompress ---------------------------------------------------------------
def test_decompress_reads_the_most_significant_nibble_first():
    t = np.array([[[0x1234, 0xF00A]]], np.uint16)  # (1 row, 1 group, 2 words)
    scale = np.array([[[0.5]]], np.float16)
    bias = np.array([[[-1.0]]], np.float16)
    (got,), _ = _one(lambda a, s, b: [group_quantize_decompress(a, s, b)], [t, scale, bias])
    codes = np.array([1, 2, 3, 4, 15, 0, 0, 10])
    np.testing.assert_array_equal(got, (codes * 0.5 - 1.0)[None].astype(np.float16))
    assert got.dtype == np.float16


@pytest.mark.parametrize("backend", BACKENDS)
def test_compress_then_decompress_round_trips(backend):
    rng = np.random.default_rng(2)
    w = rng.normal(size=(3, 64)).astype(np.float32)
    packed, scale, bias = group_quantize_compress_numpy(w, 16, -1)
    assert packed.shape == (3, 4, 4) and packed.dtype == np.uint16
    assert scale.shape == bias.shape == (3, 4, 1) and scale.dtype == np.float16
    (got, transposed), _ = _one(lambda a, s, b: [group_quantize_decompress(a, s, b),
                                                 group_quantize_decompress(a, s[:, :, 0], b, 0)],
                                [packed, scale, bias], backend)
    np.testing.assert_array_equal(got, group_quantize_decompress_numpy(packed, scale, bias, -1))
    np.testing.assert_array_equal(transposed, got.T)
    # float16 arithmetic: each code times its scale, then plus the bias, rounded each time
    codes = np.stack([(packed >> s) & 15 for s in (12, 8, 4, 0)], -1).reshape(3, 4, 16)
    want = (codes.astype(np.float16) * scale + bias).reshape(3, 64)
    np.testing.assert_array_equal(got, want)
    # within half a step (plus float16 rounding) of the original
    step = np.repeat(scale[..., 0].astype(np.float32), 16, axis=1)
    assert (np.abs(got.astype(np.float32) - w) <= step / 2 + 2e-3).all()


def test_compress_packs_codes_first_most_significant():
    packed, scale, bias = group_quantize_compress_numpy(np.array([[0.0, 1.0, 2.0, 3.0]]), 4, -1)
    # bias 0, scale 3/15 = 0.2: codes 0, 5, 10, 15 -> 0*4096 + 5*256 + 10*16 + 15
    assert packed.tolist() == [[[1455]]]
    assert scale.tolist() == [[[np.float16(0.2)]]] and bias.tolist() == [[[0.0]]]
    columns = np.arange(16.0).reshape(8, 2)  # compressed along axis 0
    packed, scale, _ = group_quantize_compress_numpy(columns, 8, dim=0)
    assert packed.shape == (2, 1, 2) and scale.shape == (2, 1, 1)


def test_group_quantize_errors():
    with pytest.raises(ValueError, match="non-finite"):
        group_quantize_compress_numpy(np.array([[np.nan, 1, 2, 3]]), 4, -1)
    ir = xlgraph.Ir()
    with ir.main_graph:
        t = xlgraph.constant(np.zeros((2, 3, 4), np.uint16), xlgraph.uint16)
        s = xlgraph.constant(np.ones((2, 3, 1), np.float16))
        with pytest.raises(NotImplementedError, match="rank 3"):
            group_quantize_decompress(t.reshape((6, 4)), s, s)
        with pytest.raises(ValueError, match="leading dims"):
            group_quantize_decompress(t, s[:1], s[:1])


# -- linear_layout ---------------------------------------------------------------------------------
def test_linear_layout_is_a_copy():
    x = np.arange(12.0).reshape(3, 4)
    (got,), _ = _one(lambda t: [linear_layout(t, 4)], [x])
    np.testing.assert_array_equal(got, x)


# -- fp8 scales ----------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_fp8_amax_scale(backend):
    x = np.array([0.5, -3.0, 1.0], np.float32)
    (a143, a152, zero, huge), _ = _one(lambda t, z, h: [
        addons_ops.fp8_amax_scale(t), addons_ops.fp8_amax_scale(t, xlgraph.float8_152),
        addons_ops.fp8_amax_scale(z), addons_ops.fp8_amax_scale(h)],
        [x, np.zeros(3, np.float16), np.array([1e30], np.float32)], backend)
    assert a143.dtype == np.int32 and a143.shape == ()
    assert (a143, a152, zero, huge) == (6, 14, 31, -31)  # log2(240/3)=6.3, log2(57344/3)=14.2


@pytest.mark.parametrize("backend", BACKENDS)
def test_fp8_mse_scale_centres_the_range(backend):
    """|x| in [1, 2): every candidate whose range holds 2^0 ties (18 for 1-4-3 from candidate
    24, 33 for 1-5-2 from 16); the middle of the plateau is 31 - (24 + 9) = -2 and
    31 - (16 + 16) = -1: the values land mid-range of the exponents [-10, 7] / [-17, 15]."""
    x = np.random.default_rng(3).uniform(1.0, 2.0, 50).astype(np.float32)
    (s143, s152, s16), _ = _one(lambda t, h: [
        fp8_mse_scale(t), fp8_mse_scale(t, xlgraph.float8_152), fp8_mse_scale(h)],
        [x, x.astype(np.float16)], backend)
    assert (s143, s152) == (-2, -1)
    assert s16 == -2  # float16 keeps the level 2^0 (most others collapse to 0 or inf)


def test_fp8_scales_need_float16_or_float32():
    ir = xlgraph.Ir()
    with ir.main_graph:
        t = xlgraph.constant(np.zeros(3, np.float64), xlgraph.float64)
        for fn in (addons_ops.fp8_amax_scale, fp8_mse_scale):
            with pytest.raises(RuntimeError, match="float16 or float32"):
                fn(t)


# -- static sparse -----------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_dense_const_sparse_matmul_matches_scipy(backend):
    sp = pytest.importorskip("scipy.sparse")
    rng = np.random.default_rng(4)
    dense = random_sparse(rng.normal(size=(6, 5)), 0.3)
    rhs = sp.csr_matrix(dense)
    lhs = rng.normal(size=(4, 6)).astype(np.float32)
    lhs16 = lhs.astype(np.float16)
    (y, y3, y16), _ = _one(lambda a, b, c: [
        dense_const_sparse_matmul(a, rhs, 5), dense_const_sparse_matmul(b, rhs, 5),
        dense_const_sparse_matmul(c, rhs, 5)], [lhs, lhs[None], lhs16], backend)
    np.testing.assert_allclose(y, lhs @ rhs.toarray(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(y3[0], y)
    assert y16.dtype == np.float16
    r16 = rhs.toarray().astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(y16, (lhs16.astype(np.float32) @ r16).astype(np.float16))


def test_random_sparse_zeroes_in_place_and_keeps_one():
    a = np.ones((20, 20))
    assert random_sparse(a, 0.25) is a
    assert 0.1 < (a != 0).mean() < 0.4
    b = np.ones((3, 3))
    random_sparse(b, 0.0)
    assert (b != 0).sum() == 1


def test_dense_const_sparse_matmul_errors():
    sp = pytest.importorskip("scipy.sparse")
    ir = xlgraph.Ir()
    with ir.main_graph:
        t = xlgraph.constant(np.zeros((2, 3), np.float32))
        with pytest.raises(xlgraph.errors.ShapeError, match=r"\(k, output_cols\)"):
            dense_const_sparse_matmul(t, sp.csr_matrix(np.eye(3)), 4)
        with pytest.raises(RuntimeError, match="float16 or float32"):
            dense_const_sparse_matmul(xlgraph.constant(np.zeros((2, 3), np.int32)),
                                      sp.csr_matrix(np.eye(3)), 3)


# -- cross_entropy / cross_entropy_with_grad (composites) ----------------------------------------
def _ce_reference(x, labels, ignore, reduction):
    keep = labels != ignore
    logp = x - x.max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    picked = np.take_along_axis(logp, np.where(keep, labels, 0)[..., None], -1)[..., 0]
    per = np.where(keep, -picked, 0.0)
    return {"mean": per.sum() / keep.sum(), "sum": per.sum(), "none": per}[reduction]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_matches_numpy_and_differentiates(reduction):
    rng = np.random.default_rng(6)
    x = rng.normal(0, 2, (3, 4, 5)).astype(np.float32)
    labels = rng.integers(0, 5, (3, 4)).astype(np.int32)
    labels[0, 1] = labels[2, 3] = 7  # ignore_index
    seed = rng.normal(size=(3, 4) if reduction == "none" else ()).astype(np.float32)
    (loss,), (dx,) = _one(lambda t, lab: [addons_ops.cross_entropy(t, lab, 7, reduction)],
                          [x, labels], seeds=[seed])
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(loss, _ce_reference(x64, labels, 7, reduction), rtol=1e-5)
    direction = rng.normal(size=x.shape)

    def objective(eps):
        return np.sum(seed * _ce_reference(x64 + eps * direction, labels, 7, reduction))

    numeric = (objective(1e-6) - objective(-1e-6)) / 2e-6
    assert float(np.sum(dx * direction)) == pytest.approx(numeric, rel=1e-4)
    assert not dx[0, 1].any() and not dx[2, 3].any()


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_cross_entropy_with_grad_scales_only_the_gradient(reduction):
    rng = np.random.default_rng(7)
    x = rng.normal(size=(6, 4)).astype(np.float32)
    labels = np.array([0, 3, 1, -1, 2, 2], np.int32)
    (loss, dx), _ = _one(lambda t, lab: list(addons_ops.cross_entropy_with_grad(
        t, lab, loss_scaling=64, ignore_index=-1, reduction=reduction)), [x, labels])
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(loss, _ce_reference(x64, labels, -1, reduction), rtol=1e-5)
    softmax = np.exp(x64) / np.exp(x64).sum(1, keepdims=True)
    keep = (labels != -1)[:, None]
    want = 64 * (softmax - np.eye(4)[np.where(keep[:, 0], labels, 0)]) * keep
    want = want / keep.sum() if reduction == "mean" else want
    np.testing.assert_allclose(dx, want, rtol=1e-5, atol=1e-6)
    assert dx.dtype == np.float32


@pytest.mark.parametrize("backend", BACKENDS)
def test_local_ops_run_each_replica_on_its_own_data(backend):
    """On 3 replicas, every replica's result is the op of its own inputs."""
    sp = pytest.importorskip("scipy.sparse")
    rng = np.random.default_rng(11)
    x = rng.normal(size=(3, 1, 2, 1, 4))
    angles = rng.uniform(-3, 3, (3, 2, 2))  # a table per replica
    sin, cos = np.sin(angles), np.cos(angles)
    packed = rng.integers(0, 1 << 16, (3, 2, 1, 1)).astype(np.uint16)
    scale = rng.uniform(0.1, 0.2, (3, 2, 1, 1)).astype(np.float16)
    rhs = sp.csr_matrix(random_sparse(rng.normal(size=(4, 3)), 0.5))
    lhs = rng.normal(size=(3, 2, 4)).astype(np.float32)

    def fwd(t, s, c, q, qs, a):
        return [rotary_pos_embed(t, s, c), group_quantize_decompress(q, qs, qs),
                dense_const_sparse_matmul(a, rhs, 3), grad_reduce_square_add(a, 2.0),
                addons_ops.fp8_amax_scale(a), linear_layout(t)]

    outs, _ = run(3, fwd, [x, sin, cos, packed, scale, lhs], backend=backend)
    for r in range(3):
        np.testing.assert_allclose(outs[0][r], _rotary_reference(x[r], angles[r], 4),
                                   atol=1e-12)
        np.testing.assert_array_equal(
            outs[1][r], group_quantize_decompress_numpy(packed[r], scale[r], scale[r], -1))
        np.testing.assert_allclose(outs[2][r], lhs[r] @ rhs.toarray(), rtol=1e-5, atol=1e-6)
        assert outs[3][r] == pytest.approx(float(np.sum(lhs[r].astype(np.float64) ** 2) / 4),
                                           rel=1e-6)
        assert outs[4][r] == np.floor(np.log2(240 / np.abs(lhs[r]).max()))
        np.testing.assert_array_equal(outs[5][r], x[r])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("replicas", [1, 2, 4, 8])
def test_fp8_scales_and_sparse_matmul_per_replica(backend, replicas):
    """The fp8 scale ops and the dense-sparse product on 1..8 replicas (their replicated forms):
    each replica's scale comes from its own elements (magnitudes differ per replica, so the
    scales do), and a constant held once gives every replica the same scale."""
    sp = pytest.importorskip("scipy.sparse")
    rng = np.random.default_rng(replicas)
    mags = 2.0 ** rng.integers(-12, 12, replicas)
    x = (rng.normal(size=(replicas, 5, 4)) * mags[:, None, None]).astype(np.float32)
    rhs = sp.csr_matrix(random_sparse(rng.normal(size=(4, 3)), 0.5))
    held = rng.normal(size=(6,)).astype(np.float32) * 100

    def fwd(t):
        c = xlgraph.constant(held)
        return [addons_ops.fp8_amax_scale(t), addons_ops.fp8_amax_scale(t, xlgraph.float8_152),
                fp8_mse_scale(t), fp8_mse_scale(t, xlgraph.float8_152),
                addons_ops.fp8_amax_scale(c), fp8_mse_scale(c),
                dense_const_sparse_matmul(t, rhs, 3)]

    outs, _ = run(replicas, fwd, [x], backend=backend)
    for r in range(replicas):
        amax = np.abs(x[r].astype(np.float64)).max()
        assert outs[0][r] == np.clip(np.floor(np.log2(240 / amax)), -31, 31)
        assert outs[1][r] == np.clip(np.floor(np.log2(57344 / amax)), -31, 31)
        assert outs[2][r] == _mse_scale_loop(x[r], 3, -10, 7)
        assert outs[3][r] == _mse_scale_loop(x[r], 2, -17, 15)
        assert outs[4][r] == np.floor(np.log2(240 / np.abs(held).max()))
        assert outs[5][r] == _mse_scale_loop(held, 3, -10, 7)
        want = x[r].astype(np.float64) @ rhs.toarray().astype(np.float32)
        np.testing.assert_allclose(outs[6][r], want, rtol=1e-5, atol=1e-6 * mags[r])
    if replicas > 1:
        assert len(set(outs[0].tolist())) > 1  # the replicas' scales differ


def _mse_scale_loop(x: np.ndarray, mantissa: int, min_exp: int, max_exp: int) -> int:
    """fp8_mse_scale written out term by term from the formula (float32 input)."""
    levels = [2.0 ** (k - 126) for k in range(254)]
    h = [0.0] * 254
    for v in np.abs(x.astype(np.float64)).ravel():
        k = next((j for j in range(253, -1, -1) if v >= levels[j]), None)
        if k is not None:
            h[k] += 1 / x.size
    m, span, q = min_exp - 31 + 126, max_exp - min_exp + 1, 2.0 ** (-2 * (10 - mantissa))
    costs = []
    for c in range(62):
        lo, hi = m + c, m + c + span
        costs.append(sum(h[j] * levels[j] ** 2 for j in range(1, lo))
                     + q * sum(h[j] * levels[j] ** 2 for j in range(lo, hi))
                     + sum(h[j] * (levels[hi - 1] - levels[j]) ** 2 for j in range(hi, 254)))
    best = min(costs)
    first = costs.index(best)
    return 31 - (first + sum(1 for c in costs if c == best) // 2)
