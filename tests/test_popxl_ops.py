"""PopXL's remaining ops (scatter_reduce, groupedgather, histogram, roi_align) and the planning
arguments every op accepts."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import errors, ops, transforms
from xlgraph.op import REGISTRY
from xlgraph.testing import run_once

F32 = popxl.float32


def _run(build, *arrays):
    """Run ``build(*tensors)`` on variables holding ``arrays``; return its outputs' values."""
    ir = popxl.Ir()
    with ir.main_graph:
        outs = build(*(popxl.variable(a) for a in arrays))
        outs = outs if isinstance(outs, tuple) else (outs,)
        streams = [popxl.d2h_stream(t.shape, t.dtype, f"o{i}") for i, t in enumerate(outs)]
        for s, t in zip(streams, outs):
            ops.host_store(s, t)
    got = run_once(ir)
    return [got[s] for s in streams]


# -- scatter_reduce ----------------------------------------------------------------------------
def test_scatter_reduce_semantics() -> None:
    data = np.array([[1.0, -2.0], [3.0, 5.0], [-4.0, 0.5]], np.float32)
    idx = np.array([2, 0, 2], np.int32)  # 1-D: broadcast along the other axis
    init = np.full((4, 2), 10.0, np.float32)
    summed, maxed, with_init, last = _run(lambda d, i, v: (
        ops.scatter_reduce(d, i, "sum", axis_size=4),
        ops.scatter_reduce(d, i, "max", axis_size=4),
        ops.scatter_reduce(d, i, "min", initial_values=v, axis_size=4),
        ops.scatter_reduce(d, i, "none", axis_size=4)), data, idx, init)
    np.testing.assert_array_equal(summed, [[3, 5], [0, 0], [-3, -1.5], [0, 0]])
    np.testing.assert_array_equal(maxed, [[3, 5], [0, 0], [1, 0.5], [0, 0]])  # untouched: 0
    np.testing.assert_array_equal(with_init, [[3, 5], [10, 10], [-4, -2], [10, 10]])
    np.testing.assert_array_equal(last, [[3, 5], [0, 0], [-4, 0.5], [0, 0]])


def test_scatter_reduce_refusals() -> None:
    with popxl.Ir().main_graph:
        d = popxl.variable(np.ones((3, 2), np.float32))
        with pytest.raises(ValueError, match="reduction must be one of"):
            ops.scatter_reduce(d, np.zeros(3, np.int32), "mean")
        with pytest.raises(errors.ShapeError, match="enable_index_broadcast"):
            ops.scatter_reduce(d, np.zeros(3, np.int32), "sum", enable_index_broadcast=False)
    ir = popxl.Ir()
    g = ir.create_graph(lambda d: ops.scatter_reduce(d, np.zeros(3, np.int32), "none"),
                        popxl.TensorSpec((3, 2), F32))
    with pytest.raises(errors.AutodiffError, match="'none' has no gradient"):
        transforms.autodiff(g)


# -- groupedgather -----------------------------------------------------------------------------
def test_groupedgather_gathers_per_group_and_differentiates() -> None:
    rng = np.random.default_rng(0)
    t = rng.normal(size=(3, 5, 2)).astype(np.float32)
    idx = np.array([[0, 4], [1, 1], [9, -1]], np.int32)  # 9 is out of range: zeros
    (got,) = _run(lambda a, i: ops.groupedgather(a, i, axis=0, group_size=3), t, idx)
    want = np.stack([np.take(t[g], np.clip(idx[g], -5, 4), axis=0) for g in range(3)])
    want[2, 0] = 0
    np.testing.assert_array_equal(got, want)

    ir = popxl.Ir()
    g = ir.create_graph(lambda a: ops.groupedgather(a, idx, axis=0, group_size=3),
                        popxl.TensorSpec(t.shape, F32))
    info = transforms.autodiff(g)
    with ir.main_graph:
        x = popxl.variable(t)
        dy = popxl.variable(np.ones((3, 2, 2), np.float32))
        site = ops.call_with_info(g, x)
        (dx,) = ops.call(info.graph, dy, inputs_dict=info.inputs_dict(site))
        s = popxl.d2h_stream(dx.shape, F32, "dx")
        ops.host_store(s, dx)
    counts = np.zeros((3, 5, 2), np.float32)
    for grp in range(3):
        for i in idx[grp]:
            if -5 <= i < 5:
                counts[grp, i] += 1
    np.testing.assert_array_equal(run_once(ir)[s], counts)
    with popxl.Ir().main_graph, pytest.raises(errors.ShapeError, match="group_size=2"):
        ops.groupedgather(popxl.variable(t), idx, group_size=2)


# -- histogram ---------------------------------------------------------------------------------
def test_histogram_bins_are_half_open() -> None:
    x = np.array([-3.0, -1.0, 0.0, 0.5, 1.0, 2.0, -0.5], np.float32)
    plain, absolute = _run(lambda t: (ops.histogram(t, [-1.0, 0.5, 1.0], False),
                                      ops.histogram(t, [-1.0, 0.5, 1.0], True)), x)
    assert plain.dtype == np.uint32
    np.testing.assert_array_equal(plain, [1, 3, 1, 2])  # [-1, 0.5) holds -1, 0, -0.5
    np.testing.assert_array_equal(absolute, [0, 1, 2, 4])
    with popxl.Ir().main_graph, pytest.raises(ValueError, match="ascending"):
        ops.histogram(popxl.variable(x), [1.0, 0.0], False)


# -- roi_align ---------------------------------------------------------------------------------
def test_roi_align_matches_the_pointwise_reference_and_has_an_adjoint_gradient() -> None:
    """Boxes reaching past the map's edges, a tiny box and adaptive sampling; the registry sweep
    checks both gradients by finite differences on its own samples."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 3, 9, 11))
    rois = np.array([[0.5, 1.0, 6.0, 7.5], [-2.0, 3.0, 4.0, 12.0], [2.0, 2.0, 2.5, 2.2]])
    batch = np.array([1, 0, 1])
    attrs = {"output_size": (3, 2), "spatial_scale": 0.8, "sampling_ratio": 0, "aligned": True}
    fwd, grad = REGISTRY["roi_align"], REGISTRY["roi_align_grad"]
    y = fwd.kernel(x, rois, batch, **attrs)
    np.testing.assert_allclose(y, fwd.ref(x, rois, batch, **attrs), rtol=1e-12, atol=1e-12)
    dy = rng.normal(size=y.shape)
    dx, _ = grad.kernel(dy, x, rois, batch, **attrs)
    assert np.sum(y * dy) == pytest.approx(np.sum(x * dx), rel=1e-12)  # <Ax, dy> = <x, A'dy>
    direction, eps = rng.normal(size=x.shape), 1e-6
    numeric = np.sum(dy * (fwd.kernel(x + eps * direction, rois, batch, **attrs)
                           - fwd.kernel(x - eps * direction, rois, batch, **attrs))) / (2 * eps)
    assert np.sum(dx * direction) == pytest.approx(numeric, rel=1e-6)


def test_roi_align_in_a_session_and_its_autodiff_gradient() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(1, 2, 6, 6)).astype(np.float32)
    rois = np.array([[1.0, 1.0, 4.0, 5.0]], np.float32)
    ir = popxl.Ir()
    g = ir.create_graph(lambda t, r: ops.roi_align(t, r, np.zeros(1, np.int32), (2, 2), 1.0, 2),
                        popxl.TensorSpec(x.shape, F32), popxl.TensorSpec(rois.shape, F32))
    info = transforms.autodiff(g, grads_required=[g.inputs[0]])
    with ir.main_graph:
        site = ops.call_with_info(g, popxl.variable(x), popxl.variable(rois))
        dy = popxl.variable(np.ones((1, 2, 2, 2), np.float32))
        (dx,) = ops.call(info.graph, dy, inputs_dict=info.inputs_dict(site))
        streams = {n: popxl.d2h_stream(t.shape, F32, n) for n, t in (("y", site.outputs[0]),
                                                                      ("dx", dx))}
        ops.host_store(streams["y"], site.outputs[0])
        ops.host_store(streams["dx"], dx)
    got = run_once(ir)
    attrs = {"output_size": (2, 2), "spatial_scale": 1.0, "sampling_ratio": 2, "aligned": True}
    np.testing.assert_allclose(got[streams["y"]], REGISTRY["roi_align"].ref(
        x.astype(np.float64), rois, np.zeros(1, int), **attrs), rtol=1e-5)
    np.testing.assert_allclose(got[streams["dx"]].sum(), 8.0 * 1, rtol=1e-5)  # weights sum to 1


# -- planning arguments ------------------------------------------------------------------------
def test_planning_arguments_are_recorded_as_hints() -> None:
    with popxl.Ir().main_graph:
        a = popxl.variable(np.ones((2, 3), np.float32))
        b = popxl.variable(np.ones((3, 4), np.float32))
        mm = ops.matmul(a, b, available_memory_proportion=0.2, partials_type="half")
        assert mm.producer.hints == {"available_memory_proportion": 0.2, "partials_type": "half"}
        assert "available_memory_proportion" not in mm.producer.attrs  # never reaches kernels
        x = popxl.variable(np.ones((1, 2, 5, 5), np.float32))
        w = popxl.variable(np.ones((3, 2, 3, 3), np.float32))
        plural = ops.conv(x, w, available_memory_proportions=[0.3], partials_types=["float"],
                          enable_conv_dithering=[1])
        singular = ops.conv(x, w, available_memory_proportion=0.3, partials_type="float")
        assert plural.producer.hints == {"available_memory_proportion": [0.3],
                                         "partials_type": ["float"], "enable_conv_dithering": [1]}
        assert singular.producer.hints["partials_type"] == "float"
        i = popxl.variable(np.zeros(2, np.int32))
        for t in (ops.gather(a, i, available_memory_proportion=0.5),
                  ops.topk(a, 2, 1, available_memory_proportion=0.5)[0],
                  ops.scatter_reduce(a, np.zeros((2, 3), np.int32), "sum",
                                     available_memory_proportion=0.5)):
            assert t.producer.hints["available_memory_proportion"] == 0.5


def test_matmul_output_type_computes_in_that_type() -> None:
    rng = np.random.default_rng(4)
    a = rng.normal(size=(8, 64)).astype(np.float16)
    b = rng.normal(size=(64, 8)).astype(np.float16)
    wide, narrow = _run(lambda x, y: (ops.matmul(x, y, output_type=popxl.float32),
                                      ops.matmul(x, y)), a, b)
    assert wide.dtype == np.float32 and narrow.dtype == np.float16
    exact = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(wide, exact, rtol=1e-5, atol=1e-5)  # fp16 products are exact
    assert np.abs(wide - exact).max() < np.abs(narrow - exact).max()
