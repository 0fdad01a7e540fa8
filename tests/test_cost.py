"""Declared op facts: every op's cost against hand counts, view layouts against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from op_harness import build_op, sample_arrays

import xlgraph
from xlgraph import ops
from xlgraph.cost import Cost
from xlgraph.layout import broadcast_layout, index_layout, permuted_layout
from xlgraph.op import REGISTRY
from xlgraph.tensor import TensorSpec

SAMPLED = sorted(n for n, d in REGISTRY.items() if d.samples is not None)


def _bytes(tensors) -> int:
    return sum(t.nelms * np.dtype(t.dtype.as_numpy()).itemsize for t in tensors)


def _sample_ops():
    for name in SAMPLED:
        defn = REGISTRY[name]
        for i, sample in enumerate(defn.samples(np.random.default_rng(0))):
            yield name, i, build_op(defn, sample, sample_arrays(sample, np.float32))[3]


@pytest.mark.parametrize("name", SAMPLED)
def test_every_registered_op_declares_a_cost(name: str) -> None:
    defn = REGISTRY[name]
    for i, sample in enumerate(defn.samples(np.random.default_rng(0))):
        op = build_op(defn, sample, sample_arrays(sample, np.float32))[3]
        cost = op.cost()
        assert isinstance(cost, Cost) and cost.flops >= 0, (name, i, cost)
        if defn.view and not defn.side_effect:  # views move no data
            assert (cost.flops, cost.bytes_read, cost.bytes_written) == (0, 0, 0)
        else:  # kernels read every input and write every output once
            assert cost.bytes_read == _bytes(op.inputs), (name, i)
            assert cost.bytes_written == (0 if defn.view else _bytes(op.outputs)), (name, i)


def test_ops_without_samples_get_family_costs() -> None:
    ir = xlgraph.Ir()
    sub = ir.create_graph(lambda x: x * 2.0, xlgraph.TensorSpec((3,), xlgraph.float32))
    with ir.main_graph:
        stream = xlgraph.h2d_stream((3,), xlgraph.float32, "x")
        x = ops.host_load(stream)
        (y,) = ops.call(sub, x)
        ops.host_store(xlgraph.d2h_stream((3,), xlgraph.float32, "y"), y)
    kinds = {op.defn.kind: op.cost() for op in ir.main_graph.ops}
    assert kinds["call"] == Cost(0.0, 0, 0)  # the body's ops are costed where they run
    assert kinds["host_load"] == Cost(0.0, 0, 12)
    assert kinds["host_store"] == Cost(0.0, 12, 0)
    untested = [n for n, d in REGISTRY.items() if d.samples is None]
    assert set(untested) <= {"call", "repeat", "conditional", "host_load", "host_store"}


def _single(name: str, *shapes, **kwargs):
    rng = np.random.default_rng(0)
    ir = xlgraph.Ir()
    with ir.main_graph:
        ts = [xlgraph.constant(rng.normal(size=s).astype(np.float32)) for s in shapes]
        getattr(ops, name)(*ts, **kwargs)
    return ir.main_graph.ops[-1]


def test_hand_counted_costs() -> None:
    f32 = 4
    mm = _single("matmul", (3, 4), (4, 5)).cost()  # 3 x 5 outputs, 4 multiply-adds each
    assert mm == Cost(3 * 5 * 4 * 2, (12 + 20) * f32, 15 * f32, matrix=True)
    batched = _single("matmul", (2, 1, 3, 4), (5, 4, 2)).cost()  # (2, 5, 3, 2) outputs
    assert batched.flops == 2 * 5 * 3 * 2 * 4 * 2
    add = _single("add", (3, 4), (4,)).cost()
    assert add == Cost(12, (12 + 4) * f32, 12 * f32)
    total = _single("sum", (3, 4, 5), axis=1).cost()  # one add per input element
    assert total == Cost(60, 60 * f32, 15 * f32)
    # conv (2, 3, 7, 6) * (4, 3, 3, 2): output (2, 4, 5, 5), each 3 x 3 x 2 multiply-adds
    conv = _single("conv", (2, 3, 7, 6), (4, 3, 3, 2)).cost()
    assert conv.matrix and conv.flops == 2 * (2 * 4 * 5 * 5) * (3 * 3 * 2)
    # two groups: each output channel sees 2 of the 4 input channels
    grouped = _single("conv", (2, 4, 6, 5), (6, 2, 3, 3), groups=2).cost()
    assert grouped.flops == 2 * (2 * 6 * 4 * 3) * (2 * 3 * 3)
    pool = _single("max_pool", (2, 3, 6, 6), kernel_size=(2, 2), stride=(2, 2)).cost()
    assert pool.flops == (2 * 3 * 3 * 3) * 4 and not pool.matrix
    gelu = _single("gelu", (3, 4)).cost()
    assert gelu.flops == 12 * 8  # eight numpy operations per element in its kernel
    assert _single("gelu_", (3, 4)).cost() == gelu  # in-place variants cost what their base does
    view = _single("transpose", (3, 4)).cost()
    assert view == Cost(0.0, 0, 0)


def test_costs_grow_with_problem_size() -> None:
    small = _single("matmul", (8, 16), (16, 8)).cost()
    large = _single("matmul", (16, 16), (16, 8)).cost()
    assert large.flops == 2 * small.flops and large.bytes_read > small.bytes_read


def _numpy_layout(a: np.ndarray) -> str:
    if a.flags.c_contiguous:
        return "C"
    dense, expect = True, a.itemsize
    for stride, n in sorted((st, n) for n, st in zip(a.shape, a.strides) if n > 1):
        dense, expect = dense and stride == expect, expect * n
    return "D" if dense else "?"


def test_declared_view_layouts_match_numpy() -> None:
    rng = np.random.default_rng(7)
    for _ in range(300):
        shape = tuple(int(n) for n in rng.integers(1, 5, rng.integers(1, 4)))
        x = np.empty(shape, np.float32)
        spec = TensorSpec(shape, xlgraph.float32)
        index = tuple(
            int(rng.integers(0, n)) if rng.random() < 0.2 else
            slice(int(rng.integers(0, n)), int(rng.integers(0, n + 1)), int(rng.choice([1, 2, -1])))
            for n in shape[: rng.integers(0, len(shape) + 1)]
        )
        assert index_layout(spec, index) == _numpy_layout(x[index]), (shape, index)
        perm = tuple(int(p) for p in rng.permutation(len(shape)))
        assert permuted_layout(spec, perm) == _numpy_layout(x.transpose(perm)), (shape, perm)
        target = tuple(int(rng.integers(1, 3)) if n == 1 else n for n in shape)
        target = (2,) * int(rng.integers(0, 2)) + target
        got = broadcast_layout(spec, target)
        assert got == _numpy_layout(np.broadcast_to(x, target)), (shape, target)


def test_view_ops_declare_the_layout_their_kernel_gives() -> None:
    for name, i, op in _sample_ops():
        defn = op.defn
        if not defn.view or defn.side_effect or len(op.inputs) != 1:
            continue
        assert defn.layout is not None, name
        x = np.empty(op.inputs[0].shape, np.float32)
        declared = defn.layout(op.inputs[0].spec, **op.attrs)
        assert declared == _numpy_layout(defn.kernel(x, **op.attrs)), (name, i)
