"""Op library part 2: kernels against plain-loop references (and torch where installed), operator
overloads, indexing semantics, composite builders and the in-place view variants."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph
from xlgraph import ops
from xlgraph.errors import DTypeError, ShapeError
from xlgraph.op import REGISTRY
from xlgraph.transforms import autodiff


def run(build, *arrays: np.ndarray, optimize: bool = True) -> list[np.ndarray]:
    """Feed ``arrays`` through h2d streams into ``build(*tensors)``; return its outputs."""
    ir = xlgraph.Ir()
    with ir.main_graph:
        streams = [xlgraph.h2d_stream(a.shape, xlgraph.dtypes.of_array(a), f"in{i}")
                   for i, a in enumerate(arrays)]
        result = build(*[ops.host_load(s) for s in streams])
        outs = [result] if isinstance(result, xlgraph.Tensor) else list(result)
        d2h = [xlgraph.d2h_stream(t.shape, t.dtype, f"out{i}") for i, t in enumerate(outs)]
        for s, t in zip(d2h, outs):
            ops.host_store(s, t)
    with xlgraph.Session(ir, optimize=optimize) as session:
        got = session.run(dict(zip(streams, arrays)))
    return [got[s] for s in d2h]


# -- clever kernels against their loop references ----------------------------------------------
@pytest.mark.parametrize("seed", range(4))
def test_topk_matches_selection_loop_including_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    defn = REGISTRY["topk"]
    x = rng.integers(0, 4, (3, 7, 5)).astype(np.float32)  # many ties
    for axis in range(3):
        for largest in (True, False):
            k = int(rng.integers(1, x.shape[axis] + 1))
            attrs = {"k": k, "axis": axis, "largest": largest, "sorted": True}
            for got, want in zip(defn.kernel(x, **attrs), defn.ref(x, **attrs)):
                np.testing.assert_array_equal(got, want)


def test_topk_agrees_with_torch() -> None:
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).normal(size=(4, 9)).astype(np.float32)
    values, indices = run(lambda t: ops.topk(t, 3, axis=1), x)
    want = torch.topk(torch.from_numpy(x), 3, dim=1)
    np.testing.assert_array_equal(values, want.values.numpy())
    np.testing.assert_array_equal(indices, want.indices.numpy())
    assert indices.dtype == np.int32


def test_cumsum_matches_running_sum_loop_both_directions() -> None:
    rng = np.random.default_rng(1)
    defn = REGISTRY["cumsum"]
    x = rng.normal(size=(3, 4, 5))
    for dim in range(3):
        for reverse in (False, True):
            np.testing.assert_allclose(defn.kernel(x, dim=dim, reverse=reverse),
                                       defn.ref(x, dim=dim, reverse=reverse), rtol=1e-12)
    (got,) = run(lambda t: ops.cumsum(t, 1), x.astype(np.float32))
    np.testing.assert_allclose(got, np.cumsum(x, 1), rtol=1e-5)


def test_gather_and_scatter_match_loops() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(4, 5, 3))
    gather, scatter = REGISTRY["gather"], REGISTRY["scatter"]
    for axis in range(3):
        n = x.shape[axis]
        idx = rng.integers(-n, n, (2, 3))
        for zero in (False, True):
            bad = np.where(rng.uniform(size=idx.shape) < 0.3, n + 2, idx) if zero else idx
            np.testing.assert_array_equal(gather.kernel(x, bad, axis=axis, zero_OOR=zero),
                                          gather.ref(x, bad, axis=axis, zero_OOR=zero))
        shape = list(x.shape)
        shape[axis] = 2
        idx = np.moveaxis(np.stack([rng.permutation(n)[:2] for _ in range(
            int(np.prod(shape)) // 2)], -1).reshape([2] + [d for i, d in enumerate(shape)
                                                          if i != axis]), 0, axis)
        values = rng.normal(size=idx.shape)
        np.testing.assert_array_equal(scatter.kernel(x, idx, values, axis=axis),
                                      scatter.ref(x, idx, values, axis=axis))


def test_gather_semantics_like_numpy_take() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = np.array([[2, 0], [1, -1]], np.int32)
    got, tied, oor = run(lambda t, i: (ops.gather(t, i, axis=1), ops.tied_gather(t, i, 1),
                                       ops.gather(t, i + 3, axis=0, zero_OOR=True)), x, idx)
    np.testing.assert_array_equal(got, np.take(x, idx, axis=1))
    np.testing.assert_array_equal(tied, got)
    # indices + 3 = [[5, 3], [4, 2]] along an axis of size 3: only 2 is in range
    np.testing.assert_array_equal(oor, [np.zeros((2, 4)), [np.zeros(4), x[2]]])


def test_gather_gradient_accumulates_repeated_indices() -> None:
    ir = xlgraph.Ir()
    with ir.main_graph:
        graph = ir.create_graph(lambda t: ops.gather(t, np.array([1, 1, 3])),
                                xlgraph.TensorSpec((4, 2), xlgraph.float32))
        info = autodiff(graph)
        seed = xlgraph.constant(np.ones((3, 2), np.float32))
        site = ops.call_with_info(graph, xlgraph.constant(np.zeros((4, 2), np.float32)))
        (grad,) = ops.call(info.graph, seed, inputs_dict=info.inputs_dict(site))
        out = xlgraph.d2h_stream(grad.shape, grad.dtype, "g")
        ops.host_store(out, grad)
    with xlgraph.Session(ir) as session:
        got = session.run()[out]
    np.testing.assert_array_equal(got, [[0, 0], [2, 2], [0, 0], [1, 1]])


@pytest.mark.parametrize("case", [((5, 6), [4, -2], (0, 1), (3, 2)), ((4, 3, 5), [2], (2,), (4,))])
def test_dynamic_slice_and_update_match_loops(case) -> None:
    shape, index, axes, sizes = case
    rng = np.random.default_rng(3)
    x, idx = rng.normal(size=shape), np.array(index)
    attrs = {"axes": axes, "sizes": sizes, "no_overlap": False}
    region = REGISTRY["dynamic_slice"].kernel(x, idx, **attrs)
    np.testing.assert_array_equal(region, REGISTRY["dynamic_slice"].ref(x, idx, **attrs))
    upd = rng.normal(size=region.shape)
    np.testing.assert_array_equal(REGISTRY["dynamic_update"].kernel(x, idx, upd, **attrs),
                                  REGISTRY["dynamic_update"].ref(x, idx, upd, **attrs))


def test_dynamic_update_in_place_writes_the_variable_at_run_time_offsets() -> None:
    ir = xlgraph.Ir()
    with ir.main_graph:
        v = xlgraph.variable(np.zeros((3, 4), np.float32), name="v")
        s = xlgraph.h2d_stream((1,), xlgraph.uint32, "offset")
        ops.dynamic_update_(v, ops.host_load(s), xlgraph.constant(np.ones((3, 2), np.float32)),
                            axes=[1], sizes=[2])
    session = xlgraph.Session(ir)
    with session:
        session.run({s: np.array([1], np.uint32)})
    want = np.zeros((3, 4), np.float32)
    want[:, 1:3] = 1
    np.testing.assert_array_equal(session.get_tensor_data(v), want)


@pytest.mark.parametrize("mode", ["half_pixel", "asymmetric", "align_corners",
                                  "pytorch_half_pixel", "tf_half_pixel_for_nn"])
@pytest.mark.parametrize("rounding", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
def test_interpolate_matches_per_element_loop(mode: str, rounding: str) -> None:
    x = np.random.default_rng(4).normal(size=(1, 2, 4, 5))
    attrs = {"scale_factor": (1.0, 1.0, 1.75, 0.6), "nearest_mode": rounding,
             "coordinate_transformation_mode": mode}
    defn = REGISTRY["interpolate"]
    np.testing.assert_array_equal(defn.kernel(x, **attrs), defn.ref(x, **attrs))


def test_interpolate_half_pixel_rounding_by_hand() -> None:
    """ONNX Resize: source = (o + 0.5) / scale - 0.5, rounded, clamped to the input."""
    up, down, down_ceil = run(
        lambda t: (ops.interpolate(t, (1, 2.0)), ops.interpolate(t, (1, 0.5)),
                   ops.interpolate(t, (1, 0.5), nearest_mode="round_prefer_ceil")),
        np.arange(6, dtype=np.float32).reshape(1, 6))
    np.testing.assert_array_equal(up, [[0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]])
    np.testing.assert_array_equal(down, [[0, 2, 4]])  # sources 0.5, 2.5, 4.5 round down
    np.testing.assert_array_equal(down_ceil, [[1, 3, 5]])


@pytest.mark.parametrize(("torch_mode", "nearest_mode", "transform"), [
    ("nearest", "floor", "asymmetric"),
    ("nearest-exact", "round_prefer_ceil", "half_pixel"),
    ("nearest-exact", "floor", "tf_half_pixel_for_nn"),
])
def test_interpolate_agrees_with_torch(torch_mode: str, nearest_mode: str, transform: str) -> None:
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(5).normal(size=(2, 3, 4, 6)).astype(np.float32)
    (got,) = run(lambda t: ops.interpolate(t, (1, 1, 2.5, 0.5), nearest_mode=nearest_mode,
                                           coordinate_transformation_mode=transform), x)
    want = torch.nn.functional.interpolate(torch.from_numpy(x), scale_factor=(2.5, 0.5),
                                           mode=torch_mode)
    np.testing.assert_array_equal(got, want.numpy())


def test_interpolate_refuses_other_modes() -> None:
    ir = xlgraph.Ir()
    with ir.main_graph:
        x = xlgraph.variable(np.zeros((1, 1, 2, 2), np.float32))
        with pytest.raises(NotImplementedError, match="only 'nearest'"):
            ops.interpolate(x, (1, 1, 2, 2), mode="linear")
        with pytest.raises(ValueError, match="nearest_mode"):
            ops.interpolate(x, (1, 1, 2, 2), nearest_mode="nearest")


def test_median_is_the_lower_median_like_torch() -> None:
    rng = np.random.default_rng(6)
    defn = REGISTRY["median"]
    x = rng.normal(size=(4, 6, 3))
    for axis in [(0,), (1,), (0, 2), (0, 1, 2)]:
        for keep in (False, True):
            np.testing.assert_array_equal(defn.kernel(x, axis=axis, keepdims=keep),
                                          defn.ref(x, axis=axis, keepdims=keep))
    torch = pytest.importorskip("torch")
    (got,) = run(lambda t: ops.median(t, axis=1), x.astype(np.float32))
    np.testing.assert_array_equal(got, torch.median(torch.from_numpy(x.astype(np.float32)),
                                                    dim=1).values.numpy())


def test_prod_gradient_is_the_product_of_the_others_even_with_zeros() -> None:
    x = np.array([[2.0, 0.0, 3.0], [0.0, 0.0, 5.0], [1.5, -2.0, 4.0]])
    got = REGISTRY["prod_grad"].kernel(np.ones(3), x, axis=(1,), keepdims=False)
    want = np.array([[np.prod(np.delete(row, i)) for i in range(3)] for row in x])
    np.testing.assert_array_equal(got, want)


# -- elementwise semantics -----------------------------------------------------------------------
def test_fmod_takes_the_sign_of_the_dividend_and_operators_map_to_ops() -> None:
    a = np.array([-3.0, 3.0, -7.5, 7.5], np.float32)
    b = np.array([2.0, -2.0, 2.0, 2.0], np.float32)
    gt = ops.greater
    m, rm, p, q, r, n = run(lambda x, y: (x % y, 7.5 % y, gt(x, y) & gt(y, 0.0), gt(x, y) | True,
                                          False | gt(x, y), ~gt(x, y)), a, b)
    np.testing.assert_array_equal(m, np.fmod(a, b))
    np.testing.assert_array_equal(m, [-1.0, 1.0, -1.5, 1.5])
    np.testing.assert_array_equal(rm, np.fmod(7.5, b))
    np.testing.assert_array_equal(p, (a > b) & (b > 0))
    np.testing.assert_array_equal(q, np.ones(4, bool))
    np.testing.assert_array_equal(r, a > b)
    np.testing.assert_array_equal(n, ~(a > b))


def test_getitem_with_index_and_mask_tensors() -> None:
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    mask = np.array([True, False, True])
    rows, rows_t, masked, masked_t, basic = run(
        lambda t, i, mk: (t[np.array([3, 0, 3])], t[i], t[mask], t[mk], t[1:, 0]),
        x, np.array([[1], [2]], np.int32), mask)
    np.testing.assert_array_equal(rows, x[[3, 0, 3]])
    np.testing.assert_array_equal(rows_t, x[[[1], [2]]])
    np.testing.assert_array_equal(masked, np.where(mask, x, 0))
    np.testing.assert_array_equal(masked_t, np.where(mask, x, 0))
    np.testing.assert_array_equal(basic, x[1:, 0])
    ir = xlgraph.Ir()
    with ir.main_graph:
        t = xlgraph.variable(x)
        with pytest.raises(TypeError, match="integer or bool"):
            t[np.array([0.5])]
        with pytest.raises(TypeError, match="integer or bool"):
            t[t]


def test_clip_maximum_predicates_and_increment_mod() -> None:
    x = np.array([-2.0, 0.1, 0.9, np.nan, np.inf, -np.inf], np.float32)
    y = np.array([0.0, 0.5, 0.5, 1.0, 1.0, 1.0], np.float32)
    c, k, mx, nan, inf, fin, inc = run(
        lambda a, b: (ops.clip(a, -1.0, 0.5), ops.clamp(a, max=0.0), ops.maximum(a, b, 0.2),
                      ops.isnan(a), ops.isinf(a), ops.isfinite(a),
                      ops.increment_mod(b, 1.5, 2.0)), x, y)
    np.testing.assert_array_equal(c, np.clip(x, -1.0, 0.5))
    np.testing.assert_array_equal(k, np.minimum(x, 0.0))
    np.testing.assert_array_equal(mx, np.maximum(np.maximum(x, y), 0.2))
    np.testing.assert_array_equal(nan, np.isnan(x))
    np.testing.assert_array_equal(inf, np.isinf(x))
    np.testing.assert_array_equal(fin, np.isfinite(x))
    np.testing.assert_allclose(inc, np.fmod(y + 1.5, 2.0))
    assert ops.clamp is ops.clip


def test_increment_mod_in_place_wraps_a_counter() -> None:
    ir = xlgraph.Ir()
    with ir.main_graph:
        counter = xlgraph.variable(np.array(0, np.int32), name="counter")
        ops.increment_mod_(counter, 1, 3)
    session = xlgraph.Session(ir)
    values = []
    with session:
        for _ in range(5):
            session.run()
            values.append(int(session.get_tensor_data(counter)))
    assert values == [1, 2, 0, 1, 2]


def test_reductions_against_numpy() -> None:
    x = np.random.default_rng(7).uniform(0.5, 2.0, (3, 4)).astype(np.float32)
    got = run(lambda t: (ops.prod(t, 1), ops.l1(t - 1.0), ops.l2(t, 0, keepdims=True),
                         ops.sumsquare(t), ops.logsum(t, (0, 1))), x)
    want = [np.prod(x, 1), np.abs(x - 1).sum(), np.sqrt((x * x).sum(0, keepdims=True)),
            (x * x).sum(), np.log(x.sum())]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5)


def test_build_time_errors_name_the_problem() -> None:
    ir = xlgraph.Ir()
    with ir.main_graph:
        x = xlgraph.variable(np.zeros((3, 4), np.float32), name="x")
        with pytest.raises(ShapeError, match="k=5"):
            ops.topk(x, 5, axis=0)
        with pytest.raises(DTypeError, match="integers"):
            ops.gather(x, x)
        with pytest.raises(ShapeError, match="size 5"):
            ops.dynamic_slice(x, np.array([0]), axes=[0], sizes=[5])
        with pytest.raises(ShapeError, match="not divisible"):
            ops.split(x, 3, axis=1)
        with pytest.raises(ShapeError, match="add up"):
            ops.split(x, [1, 1], axis=0)
        with pytest.raises(ValueError, match="stride"):  # PopXL: more strides than axes
            ops.subsample(x, [2, 2, 2])


# -- composite builders --------------------------------------------------------------------------
def test_split_and_subsample() -> None:
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    a, b, c, d, s = run(lambda t: (*ops.split(t, 3, axis=1), ops.split(t, [1, 3], axis=0)[1],
                                   ops.subsample(t, [3, 2])), x)
    for got, want in zip([a, b, c], np.split(x, 3, axis=1)):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(d, x[1:])
    np.testing.assert_array_equal(s, x[::3, ::2])


@pytest.mark.parametrize("optimize", [True, False])
def test_in_place_view_variants_alias_their_input(optimize: bool) -> None:
    """Writing through reshape_/flatten_/transpose_/slice_ changes the source tensor."""
    ir = xlgraph.Ir()
    with ir.main_graph, xlgraph.in_sequence():
        vs = [xlgraph.variable(np.zeros((2, 3), np.float32), name=f"v{i}") for i in range(4)]
        views = [ops.reshape_(vs[0], (3, 2)), ops.flatten_(vs[1]), ops.transpose_(vs[2]),
                 ops.slice_(vs[3], start=1, stop=2, axis=0)]
        for view in views:
            ops.var_updates.accumulate_(view, xlgraph.constant(
                np.arange(view.nelms, dtype=np.float32).reshape(view.shape)))
    session = xlgraph.Session(ir, optimize=optimize)
    with session:
        session.run()
    got = [session.get_tensor_data(v) for v in vs]
    np.testing.assert_array_equal(got[0], np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(got[1], np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(got[2], np.arange(6).reshape(3, 2).T)
    np.testing.assert_array_equal(got[3], [[0, 0, 0], [0, 1, 2]])
