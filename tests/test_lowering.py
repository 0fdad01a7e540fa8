"""The lowering pipeline: dead steps, folding, fusion, the buffer pool, functions, host loops,
layouts, deterministic source and the failure guarantee. Each program also runs interpreted
(``optimize=False``) and must give the same bytes."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops
from xlgraph.lower.flatten import LARGE_INLINE_ELEMENTS, LARGE_MIN_OPS, REPEATED_MIN_OPS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from models import build_mlp, mnist_batches  # noqa: E402

F32 = popxl.float32


def run(build, feeds_of, optimize: bool, runs: int = 2):
    """Build with ``build() -> (ir, streams)``, run ``runs`` times; outputs and the Session."""
    ir, streams = build()
    session = popxl.Session(ir, optimize=optimize)
    got = []
    with session:
        for _ in range(runs):
            got.append({s.name: a for s, a in session.run(feeds_of(streams)).items()})
    return got, session


def same_both_ways(build, feeds_of=lambda streams: {}, runs: int = 2) -> popxl.Session:
    """Run optimised and interpreted; assert byte equality; return the optimised Session."""
    optimised, session = run(build, feeds_of, True, runs)
    interpreted, _ = run(build, feeds_of, False, runs)
    for a, b in zip(optimised, interpreted):
        assert a.keys() == b.keys()
        for name in a:
            assert a[name].tobytes() == b[name].tobytes(), f"{name}\n{session.source}"
    return session


def store(t: popxl.Tensor, name: str) -> None:
    ops.host_store(popxl.d2h_stream(t.shape, t.dtype, name), t)


def test_source_is_byte_identical_for_the_same_ir() -> None:
    sources = {popxl.Session(build_mlp(8).ir).source for _ in range(2)}
    assert len(sources) == 1


def test_dead_steps_are_removed_and_side_effects_kept() -> None:
    def build():
        ir = popxl.Ir()
        with ir.main_graph, popxl.in_sequence():
            w = popxl.variable(np.ones((3, 4), np.float32), name="w")
            ops.exp(ops.sin(w))  # dead
            ops.scaled_add_(w, ops.tanh(w), b=0.5)  # an in-place update: kept
            ops.print_tensor(w, "printed", print_self=False)  # a side effect: kept
            store(ops.cos(w), "out")
        return ir, []

    session = same_both_ways(build)
    src = session.source
    assert "k_sin" not in src and "k_exp" not in src and "o_exp" not in src
    assert "scaled_add_" in src and "print_tensor" in src and "cos" in src


def test_constants_fold_with_the_ops_own_kernels() -> None:
    data = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)

    def build():
        ir = popxl.Ir()
        with ir.main_graph:
            c = popxl.constant(data)
            folded = ops.tanh(c) * 2.0 + ops.exp(c)
            x = ops.host_load(s := popxl.h2d_stream((3, 4), F32, "x"))
            store(x + folded, "out")
        return ir, [s]

    session = same_both_ways(build, lambda streams: {streams[0]: data[::-1].copy()})
    assert "tanh" not in session.source and "exp" not in session.source


def test_written_constants_are_fresh_on_every_execution() -> None:
    """A folded ``init`` accumulated into inside a loop starts from zero each iteration."""
    def build():
        ir = popxl.Ir()
        with ir.main_graph:
            x = ops.host_load(s := popxl.h2d_stream((4,), F32, "x"))

            def body(t: popxl.Tensor) -> popxl.Tensor:
                acc = ops.init((4,), F32)
                acc = ops.var_updates.accumulate_(acc, t)  # read its output: no ambiguity
                return acc + 1.0

            (y,) = ops.repeat(ir.create_graph(body, x.spec), 3, x)
            store(y, "out")
        return ir, [s]

    session = same_both_ways(build, lambda streams: {streams[0]: np.arange(4, dtype=np.float32)})
    assert "np.copyto(b" in session.source  # the constant is copied into a pool buffer


def test_elementwise_chains_fuse_into_one_buffer() -> None:
    def build():
        ir = popxl.Ir()
        with ir.main_graph:
            x = ops.host_load(s := popxl.h2d_stream((8, 16), F32, "x"))
            y = ops.negate(ops.exp(ops.tanh(x * 0.5) + 1.0))
            store(ops.sum(y, 0), "out")
        return ir, [s]

    session = same_both_ways(build, lambda streams: {streams[0]: np.ones((8, 16), np.float32)})
    ex = session.executable
    plan = ex.plans[ex.program]
    assert plan.fused >= 3
    assert len({b for b in plan.buffer_of.values() if ex.buffers[b].shape == (8, 16)}) == 1


def test_mnist_step_uses_out_kernels_and_a_small_pool() -> None:
    m = build_mlp(8)
    session = popxl.Session(m.ir)
    ex = session.executable
    plan = ex.plans[ex.program]
    kernels = [s for s in ex.program.walk() if s.kind == "kernel" and not s.defn.view]
    assert all(s in plan.use_out for s in kernels)  # no kernel allocates its result
    assert plan.fused >= 2  # the bias adds write into the matmul buffers
    values = sum(len(s.outs) for s in kernels)
    assert len({plan.buffer_of[r] for r in plan.buffer_of}) < values
    assert ex.written_variables == []  # SGD writes go to spare arrays: no snapshot per run
    buffers = [id(b) for b in ex.buffers]
    images, labels = mnist_batches(8, 1)[0]
    with session:
        for _ in range(2):
            session.run({m.images: images, m.labels: labels})
    assert [id(b) for b in ex.buffers] == buffers  # planned once, reused by every run


def test_repeated_large_subgraphs_become_functions() -> None:
    def build():
        ir = popxl.Ir()
        with ir.main_graph:
            x = ops.host_load(s := popxl.h2d_stream((5,), F32, "x"))

            def block(t: popxl.Tensor) -> popxl.Tensor:
                for _ in range(REPEATED_MIN_OPS):
                    t = ops.tanh(t) + 0.5
                return t

            g = ir.create_graph(block, x.spec)
            (y,) = ops.call(g, x)
            (z,) = ops.call(g, y * 2.0)
            small = ir.create_graph(lambda t: t * 3.0, x.spec)
            store(z + ops.call(small, x)[0] + ops.call(small, z)[0], "out")
        return ir, [s]

    session = same_both_ways(build, lambda streams: {streams[0]: np.arange(5, dtype=np.float32)})
    functions = re.findall(r"^def (f\d+\w*)\(", session.source, re.M)
    assert len(functions) == 1 and "block" in functions[0]  # the small graph is inlined
    assert session.source.count(f"= {functions[0]}(") == 2


@pytest.mark.parametrize("rows", [1, LARGE_INLINE_ELEMENTS // 64])
def test_a_large_graph_is_a_function_only_when_its_tensors_are_small(rows: int) -> None:
    """A graph of many ops called once runs inline when its ops move much data (the caller's
    layouts, fused loops and buffers apply: a transformer's backward pass), and is compiled as
    a function when they are small (compiling many small ops inline costs more than it saves);
    both compute what the interpreter does."""
    def build():
        ir = popxl.Ir()
        with ir.main_graph:
            x = ops.host_load(s := popxl.h2d_stream((rows, 64), F32, "x"))

            def block(t: popxl.Tensor) -> popxl.Tensor:
                for _ in range(LARGE_MIN_OPS // 2):
                    t = ops.tanh(t) * 0.5
                return ops.softmax(t, axis=1)

            (y,) = ops.call(ir.create_graph(block, x.spec), x)
            store(y, "out")
        return ir, [s]

    data = np.random.default_rng(0).normal(size=(rows, 64)).astype(np.float32)
    session = same_both_ways(build, lambda streams: {streams[0]: data}, runs=1)
    assert ("\ndef f" in session.source) == (rows == 1)


def test_host_transfers_loop_inside_the_generated_function() -> None:
    transfers = 4

    def build():
        ir = popxl.Ir()
        ir.num_host_transfers = transfers
        with ir.main_graph:
            x_s = popxl.h2d_stream((3,), F32, "x")
            out_s = popxl.d2h_stream((3,), F32, "y")
            w = popxl.variable(np.zeros(3, np.float32), name="w")

            def body() -> None:
                w = popxl.graph_input((3,), F32, "w", by_ref=True)
                w = ops.var_updates.accumulate_(w, ops.host_load(x_s))
                ops.host_store(out_s, w * 2.0)

            g = ir.create_graph(body)
            ops.repeat(g, transfers, inputs_dict={g.inputs[0]: w})
        return ir, [x_s]

    data = np.arange(12, dtype=np.float32).reshape(transfers, 3)
    session = same_both_ways(build, lambda streams: {streams[0]: data})
    src = session.source
    assert f"for t0 in range({transfers}):" in src and "IN[0][t0]" in src and "OUT[0][t0]" in src


def test_streams_read_at_several_sites_count_their_transfers() -> None:
    def build():
        ir = popxl.Ir()
        ir.num_host_transfers = 3
        with ir.main_graph:
            x_s = popxl.h2d_stream((3,), F32, "x")
            out_s = popxl.d2h_stream((3,), F32, "y")

            def body() -> None:
                a, b = ops.host_load(x_s), ops.host_load(x_s)
                ops.host_store(out_s, a - b * 2.0)

            ops.repeat(ir.create_graph(body), 1)
            (y,) = ops.call(ir.create_graph(lambda: ops.host_load(x_s) * 3.0))
            ops.host_store(out_s, y)
            ops.host_store(out_s, y + 1.0)
        return ir, [x_s]

    data = np.arange(9, dtype=np.float32).reshape(3, 3)
    session = same_both_ways(build, lambda streams: {streams[0]: data})
    assert "h0_i += 1" in session.source and "d0_i += 1" in session.source


@pytest.mark.parametrize("case", ["broadcast", "transposed", "stepped", "dynamic_rows",
                                  "dynamic_columns"])
def test_layouts_match_the_interpreter(case: str) -> None:
    """numpy picks result layouts (and so reduction orders) from input strides: views and
    pool buffers must not change them."""
    rng = np.random.default_rng(0)
    data = rng.normal(size=(32, 48)).astype(np.float32)

    def build():
        ir = popxl.Ir()
        with ir.main_graph:
            x = ops.host_load(s := popxl.h2d_stream(data.shape, F32, "x"))
            if case == "broadcast":
                v = ops.expand(x[0], (40, 48))
            elif case == "transposed":
                v = x.T
            elif case.startswith("dynamic"):  # C-ordered rows; columns with gaps between rows
                at = popxl.constant(np.array([3], np.int32))
                axis = 0 if case == "dynamic_rows" else 1
                v = ops.dynamic_slice(x, at, [axis], [20], True)
            else:
                v = ops.slice(x, start=0, stop=32, step=3, axis=0)
            y = ops.exp(ops.tanh(v))
            store(ops.sum(y, 0), "sum0")
            store(ops.sum(y, 1), "sum1")
            store(y @ ops.transpose(y), "gram")
        return ir, [s]

    same_both_ways(build, lambda streams: {streams[0]: data})


@pytest.mark.parametrize("optimize", [True, False])
def test_failed_run_restores_variables_from_one_snapshot(optimize: bool) -> None:
    """The 2nd of 3 loop iterations divides by a bad label index: nothing may change."""
    ir = popxl.Ir()
    ir.num_host_transfers = 3
    with ir.main_graph:
        x_s = popxl.h2d_stream((2, 3), F32, "x")
        lab_s = popxl.h2d_stream((2,), popxl.int32, "labels")
        w = popxl.variable(np.ones(3, np.float32), name="w")

        def body() -> None:
            w = popxl.graph_input((3,), F32, "w", by_ref=True)
            probs = ops.softmax(ops.host_load(x_s) * w, axis=-1)
            _, grad = ops.nll_loss_with_softmax_grad(probs, ops.host_load(lab_s))
            ops.scaled_add_(w, ops.sum(grad, 0), b=-0.1)

        g = ir.create_graph(body)
        ops.repeat(g, 3, inputs_dict={g.inputs[0]: w})
    session = popxl.Session(ir, optimize=optimize)
    assert [v.name for v in session.executable.written_variables] == ["w"]
    labels = np.array([[0, 1], [2, 7], [1, 1]], np.int32)  # 7 is out of range
    with session:
        with pytest.raises(popxl.errors.ExecutionError, match="nll_loss_with_softmax_grad"):
            session.run({x_s: np.ones((3, 2, 3), np.float32), lab_s: labels})
        np.testing.assert_array_equal(session.get_tensor_data(w), np.ones(3))


@pytest.mark.parametrize("also_whole", [False, True])
def test_failed_run_puts_back_the_regions_it_wrote(also_whole: bool) -> None:
    """A cache written only by ``dynamic_update_`` is not snapshotted: each write saves its
    region first, and a run that fails after two writes (a bad label) restores both. A
    variable also written whole keeps the snapshot."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        pos_s = popxl.h2d_stream((2,), popxl.int32, "pos")
        lab_s = popxl.h2d_stream((2,), popxl.int32, "labels")
        cache = popxl.variable(np.arange(12, dtype=np.float32).reshape(4, 3), name="cache")
        pos = ops.host_load(pos_s)
        for i, value in enumerate((-1.0, -2.0)):
            row = popxl.constant(np.full((1, 3), value, np.float32))
            ops.dynamic_update_(cache, pos[i:i + 1], row, [0], [1], True)
        if also_whole:
            ops.scaled_add_(cache, popxl.constant(np.ones((4, 3), np.float32)), b=0.5)
        _, grad = ops.nll_loss_with_softmax_grad(ops.softmax(cache[:2], axis=-1),
                                                 ops.host_load(lab_s))
        store(grad, "grad")
    session = popxl.Session(ir)
    expected = ["cache"] if also_whole else []
    assert [v.name for v in session.executable.written_variables] == expected
    assert ("u_dynamic_update_(UNDO" in session.source) is not also_whole
    before = np.arange(12, dtype=np.float32).reshape(4, 3)
    with session:
        with pytest.raises(popxl.errors.ExecutionError, match="nll_loss_with_softmax_grad"):
            session.run({pos_s: np.array([1, 3], np.int32), lab_s: np.array([0, 7], np.int32)})
        np.testing.assert_array_equal(session.get_tensor_data(cache), before)
        session.run({pos_s: np.array([1, 1], np.int32), lab_s: np.array([0, 2], np.int32)})
        after = before.copy()
        after[1] = -2.0
        if also_whole:
            after += 0.5
        np.testing.assert_array_equal(session.get_tensor_data(cache), after)
    assert not (session.executable.compiled.undo or [])  # nothing kept after a run
