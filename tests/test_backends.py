"""The compiled (numba) backend against the numpy reference and the interpreter.

Every op with a loop form runs on its samples (float32 and float64) through ``backend="numba"``
and must match the interpreter within ``TOLERANCE``; the MNIST training step must train the
same. The compiled kernels are cached on disk by numba, so reruns do not compile again.

Over 400 lines: one short check per rule of the compiled backend (which ops get loops, how
segments fuse, which results keep numpy's bits), each against the interpreter or numpy.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
from op_harness import run_forward, sample_arrays

import xlgraph as popxl
from xlgraph import ops
from xlgraph.errors import ExecutionError
from xlgraph.lower.backends import TOLERANCE, default_backend, get_backend
from xlgraph.op import REGISTRY

pytest.importorskip("numba", reason="needs the fast extra")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from models import build_mlp, mnist_batches  # noqa: E402

LOOPED = sorted(name for name, d in REGISTRY.items() if d.loop is not None)
CASES = [(name, i) for name in LOOPED
         for i in range(len(REGISTRY[name].samples(np.random.default_rng(0))))]


def test_the_ops_with_loop_forms() -> None:
    assert {"gelu", "gelu_grad", "softmax", "nll_loss_with_softmax_grad", "scaled_add_"} <= set(
        LOOPED)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("name", "index"), CASES)
def test_loop_form_matches_the_interpreter(name: str, index: int, dtype: type) -> None:
    defn = REGISTRY[name]
    sample = defn.samples(np.random.default_rng(index))[index]
    arrays = sample_arrays(sample, dtype)
    compiled, _ = run_forward(defn, sample, arrays, optimize=True, backend="numba")
    reference, _ = run_forward(defn, sample, arrays, optimize=False)
    for a, b in zip(compiled, reference):
        np.testing.assert_allclose(a, b, **TOLERANCE[np.dtype(dtype).name])


def _train(backend: str, steps: int = 4, fuse: bool = True,
           loop: int = 1) -> tuple[list[float], list[np.ndarray], str]:
    m = build_mlp(8, loop=loop)
    session = popxl.Session(m.ir, backend=backend, compile_in_background=False,
                            fuse_steps=fuse)
    batches = mnist_batches(8, steps * loop)
    if loop > 1:
        batches = [(np.stack([x for x, _ in batches[k:k + loop]]),
                    np.stack([y for _, y in batches[k:k + loop]]))
                   for k in range(0, len(batches), loop)]
    with session:
        losses = [session.run({m.images: x, m.labels: y})[m.out] for x, y in batches]
    return (np.ravel(losses).tolist(), [session.get_tensor_data(v) for v in m.variables],
            session.source)


@pytest.mark.parametrize(("fuse", "loop"), [(False, 1), (True, 1), (True, 5)])
def test_mnist_step_runs_compiled_loops_and_trains_like_numpy(fuse: bool, loop: int) -> None:
    """Per op (``fuse_steps=False``) and fused into segments, also in a device loop."""
    losses, weights, source = _train("numba", fuse=fuse, loop=loop)
    ref_losses, ref_weights, ref_source = _train("numpy", fuse=fuse, loop=loop)
    for op in ("bias_gelu", "gelu_grad_sum", "softmax_nll", "scaled_add_"):  # softmax_nll: loss
        assert f"j_{op}(" in source and f"j_{op}(" not in ref_source
    code = [line.split("  #")[0] for line in source.splitlines() if not line.startswith("#")]
    if fuse:  # the whole step is one segment between the host transfers, matmuls included
        assert sum("g0(" in line for line in code) == 1 and "g1(" not in source
        assert "#     j_matmul(" in source and not any("j_" in line for line in code)
    else:
        assert "o_matmul(" in source and "g0(" not in source  # BLAS stays with numpy
    np.testing.assert_allclose(losses, ref_losses, **TOLERANCE["float32"])
    for a, b in zip(weights, ref_weights):
        np.testing.assert_allclose(a, b, **TOLERANCE["float32"])
    assert _train("numba", fuse=fuse, loop=loop)[2] == source  # deterministic source


def test_every_loop_form_that_can_raise_is_listed() -> None:
    """A fused segment holds at most one op that can raise, so that its error names the op:
    every loop form (on the ops' samples) with a ``raise`` is in ``loops.RAISING``."""
    import inspect

    from op_harness import build_op

    from xlgraph.ops.loops import RAISING, Composite

    raising = set()
    for name, index in CASES:
        defn = REGISTRY[name]
        sample = defn.samples(np.random.default_rng(index))[index]
        op = build_op(defn, sample, sample_arrays(sample, np.float32))[3]
        found = defn.loop([t.spec for t in op.inputs], **op.attrs)
        if found is not None and not isinstance(found[0], Composite):
            if "raise " in inspect.getsource(found[0]):
                raising.add(found[0])
    assert raising and raising <= RAISING


def test_a_segment_that_does_not_compile_stays_separate_lines(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from xlgraph.lower.backends.numba_backend import NumbaBackend

    monkeypatch.setattr(NumbaBackend, "fuse", lambda self, fn, args: None)
    losses, weights, source = _train("numba")
    ref_losses, ref_weights, _ = _train("numpy")
    assert "g0(" not in source and "j_bias_gelu(" in source and "o_matmul(" in source
    np.testing.assert_allclose(losses, ref_losses, **TOLERANCE["float32"])


def test_a_step_fuses_at_most_its_budget_of_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``FUSED_CALLS_MAX`` calls the step keeps its compiled calls as lines (numba's compile
    time grows with a segment's calls), with the same results."""
    from xlgraph.lower import segments

    monkeypatch.setattr(segments, "FUSED_CALLS_MAX", 5)
    losses, weights, source = _train("numba")
    ref_losses, ref_weights, _ = _train("numpy")
    fused = [line for line in source.splitlines() if "# fused: " in line]
    calls = [line for line in source.splitlines() if line.startswith("#     j_")]  # segments'
    assert fused and len(calls) <= 5
    assert "j_gelu_grad(" in source or "j_scaled_add_(" in source  # calls left as lines
    np.testing.assert_allclose(losses, ref_losses, **TOLERANCE["float32"])
    for a, b in zip(weights, ref_weights):
        np.testing.assert_allclose(a, b, **TOLERANCE["float32"])


def test_segments_hold_one_raising_op_and_its_error_names_it() -> None:
    """Two label checks in a row: two segments; a failing run names the op that raised (its
    inputs and the user's line) and leaves the variables unchanged (one is updated first)."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        w = popxl.variable(np.ones((2, 3), np.float32), name="w")
        lab = ops.host_load(ls := popxl.h2d_stream((2,), popxl.int32, "l"))
        lab2 = ops.host_load(ls2 := popxl.h2d_stream((2,), popxl.int32, "l2"))
        ops.scaled_add_(w, popxl.constant(np.ones((2, 3), np.float32)), b=0.5)
        probs = ops.softmax(w, axis=1)
        _, grad = ops.nll_loss_with_softmax_grad(probs, lab)
        _, grad2 = ops.nll_loss_with_softmax_grad(ops.softmax(grad, axis=1), lab2)
        out = ops.softmax(grad2, axis=1)
        ops.host_store(popxl.d2h_stream(out.shape, out.dtype, "g"), out)
    session = popxl.Session(ir, backend="numba", compile_in_background=False)
    assert "g0(" in session.source and "g1(" in session.source
    good = np.array([0, 2], np.int32)
    with session:
        for labels, where in [({ls: np.array([0, 3], np.int32), ls2: good}, "first"),
                              ({ls: good, ls2: np.array([-1, 0], np.int32)}, "second")]:
            with pytest.raises(ExecutionError, match="nll_loss_with_softmax_grad") as info:
                session.run(labels)
            message = str(info.value)
            assert "out of range" in message and "created at test_backends.py:" in message
            assert ("l2 i32[2]" in message) == (where == "second")
            np.testing.assert_array_equal(session.get_tensor_data(w), np.ones((2, 3)))
        session.run({ls: good, ls2: good})
        np.testing.assert_array_equal(session.get_tensor_data(w), np.full((2, 3), 1.5))


def test_attributes_without_a_loop_form_keep_the_numpy_kernel() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        p = ops.host_load(ps := popxl.h2d_stream((4, 3), popxl.float32, "p"))
        lab = ops.host_load(ls := popxl.h2d_stream((4,), popxl.int32, "l"))
        loss, grad = ops.nll_loss_with_softmax_grad(p, lab, ignore_index=1)
        ops.host_store(out := popxl.d2h_stream(grad.shape, grad.dtype, "g"), grad)
    session = popxl.Session(ir, backend="numba", compile_in_background=False)
    assert "j_nll" not in session.source
    probs = np.full((4, 3), 1 / 3, np.float32)
    with session:
        got = session.run({ps: probs, ls: np.array([0, 1, 2, 1], np.int32)})[out]
    assert not got[1].any() and got[0, 0] < 0


def test_a_bad_label_fails_the_run_naming_the_op_and_leaves_variables_unchanged() -> None:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        w = popxl.variable(np.ones((2, 3), np.float32), name="w")
        lab = ops.host_load(ls := popxl.h2d_stream((2,), popxl.int32, "l"))
        ops.scaled_add_(w, popxl.constant(np.ones((2, 3), np.float32)), b=0.5)
        _, grad = ops.nll_loss_with_softmax_grad(ops.softmax(w, axis=1), lab)
        ops.host_store(popxl.d2h_stream(grad.shape, grad.dtype, "g"), grad)
    session = popxl.Session(ir, backend="numba", compile_in_background=False)
    assert "j_softmax_nll(" in session.source  # the softmax and the loss in one loop
    with session:
        with pytest.raises(ExecutionError, match="nll_loss_with_softmax_grad"):
            session.run({ls: np.array([0, 3], np.int32)})
        np.testing.assert_array_equal(session.get_tensor_data(w), np.ones((2, 3)))


def test_backend_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XLGRAPH_BACKEND", "numba")
    assert default_backend() == "numba" and get_backend(None).name == "numba"
    monkeypatch.delenv("XLGRAPH_BACKEND")
    assert default_backend() == "numba"  # installed here
    assert get_backend("numpy") is None
    with pytest.raises(ValueError, match="backend must be one of"):
        popxl.Session(build_mlp(8).ir, backend="cuda")


def test_missing_numba_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from xlgraph.lower.backends import numba_backend

    monkeypatch.setattr(numba_backend, "available", lambda: False)
    with pytest.raises(ImportError, match=r"xlgraph\[fast\]"):
        get_backend("numba")


@pytest.mark.parametrize("dtype", [popxl.float32, popxl.float64])
def test_sums_over_leading_axes_and_scaled_add_give_numpys_bits(dtype: popxl.dtypes.dtype) -> None:
    """Where the loop does numpy's float operations in numpy's order, the bits are the same."""
    rng = np.random.default_rng(3)
    got = []
    for backend in ("numba", "numpy"):
        ir = popxl.Ir()
        with ir.main_graph, popxl.in_sequence():
            w = popxl.variable(rng.normal(size=(6, 5)), dtype, name="w")
            x = ops.host_load(xs := popxl.h2d_stream((4, 6, 5), dtype, "x"))
            for axis in (0, (0, 1)):
                total = ops.sum(x, axis, keepdims=axis == 0)
                ops.host_store(popxl.d2h_stream(total.shape, dtype, f"sum{axis}"), total)
            ops.scaled_add_(w, ops.sum(x, 0), a=0.75, b=-0.3)
            ops.scaled_add_(w, w, b=0.5)  # y is x: read after scaling
        session = popxl.Session(ir, backend=backend, compile_in_background=False)
        assert ("j_sum(" in session.source) == (backend == "numba")
        assert ("j_scaled_add_(" in session.source) == (backend == "numba")
        with session:
            outs = session.run({xs: rng.normal(size=(4, 6, 5)).astype(dtype.as_numpy())})
            got.append([*outs.values(), session.get_tensor_data(w)])
        rng = np.random.default_rng(3)
    for a, b in zip(*got):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("dtype", [popxl.float32, popxl.float64])
def test_large_gelu_stays_with_numpys_simd_exp_in_float64(dtype: popxl.dtypes.dtype) -> None:
    """float64 gelu loops call the C library's exp: numpy's SIMD one wins above the cap;
    float32 ones are vectorised (``loops.exp32``) and run at any size."""
    from xlgraph.ops.loops import EXP_LOOP_MAX

    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((2, EXP_LOOP_MAX), dtype, "x"))
        small = ops.host_load(popxl.h2d_stream((2, EXP_LOOP_MAX // 2), dtype, "y"))
        for i, t in enumerate((ops.gelu(x), ops.gelu(small))):
            ops.host_store(popxl.d2h_stream(t.shape, t.dtype, f"o{i}"), t)
    source = popxl.Session(ir, backend="numba", compile_in_background=False,
                           fuse_steps=False).source
    loops = 2 if dtype is popxl.float32 else 1
    assert source.count("j_gelu(") == loops and source.count("o_gelu(") == 2 - loops


def test_float32_gelu_loops_match_numpy_over_the_whole_range() -> None:
    """The vectorised float32 exp inside ``gelu``/``gelu_grad``: normal draws over [-16, 16],
    and the edges (NaN, infinities, huge, tiny and subnormal values, where exp over- or
    underflows), against numpy's kernels."""
    from xlgraph.lower.backends.numba_backend import NumbaBackend
    from xlgraph.ops import elementwise, loops

    rng = np.random.default_rng(11)
    edges = [np.nan, np.inf, -np.inf, 100, -100, 88, -88, 1e20, -1e20, 1e-30, 3e-39, 0, -0.0]
    x = np.concatenate([rng.normal(size=20000) * 4, edges]).astype(np.float32)
    dy = rng.normal(size=x.size).astype(np.float32)
    backend = NumbaBackend()
    top = np.float32(80.0)
    got, grad = np.empty_like(x), np.empty_like(x)
    backend.jitted(loops.gelu32)(x, got, *np.float32(elementwise._GELU_C), top)
    backend.jitted(loops.gelu_grad32)(dy, x, grad, *np.float32(elementwise._GELU_GRAD_C), top)
    with np.errstate(all="ignore"):  # numpy's kernels overflow on the edges too
        want, want_grad = elementwise._gelu(x), elementwise._gelu_grad(dy, x)
    np.testing.assert_allclose(got, want, **TOLERANCE["float32"])
    np.testing.assert_allclose(grad, want_grad, **TOLERANCE["float32"])


def test_float64_gelu_grad_loop_only_up_to_its_declared_size() -> None:
    """At ``EXP_GRAD_LOOP_MAX`` elements the step calls the loop; one row more runs numpy's
    kernel instead, with the same results as the numpy backend."""
    from xlgraph.ops.elementwise import gelu_grad
    from xlgraph.ops.loops import EXP_GRAD_LOOP_MAX

    rows = EXP_GRAD_LOOP_MAX // 32
    ir = popxl.Ir()
    with ir.main_graph:
        streams, outs = [], []
        for i, shape in enumerate(((rows, 32), (rows + 1, 32))):
            dy, x = (popxl.h2d_stream(shape, popxl.float64, f"{n}{i}") for n in "dx")
            t = gelu_grad(ops.host_load(dy), ops.host_load(x))
            outs.append(popxl.d2h_stream(t.shape, t.dtype, f"o{i}"))
            ops.host_store(outs[-1], t)
            streams += [dy, x]
    rng = np.random.default_rng(5)
    feed = {s: rng.normal(size=s.shape) for s in streams}
    got = {}
    for backend in ("numba", "numpy"):
        session = popxl.Session(ir, backend=backend, compile_in_background=False)
        with session:
            got[backend] = session.run(feed)
        if backend == "numba":
            assert session.source.count("j_gelu_grad(") == 1
            assert session.source.count("o_gelu_grad(") == 1
            assert "o_gelu_grad" in session.source.split("j_gelu_grad(")[1]  # the larger one
    for o in outs:
        np.testing.assert_allclose(got["numba"][o], got["numpy"][o], **TOLERANCE["float64"])


def test_loop_calls_on_fixed_arrays_skip_the_type_dispatch() -> None:
    """A loop call whose arguments are always the same arrays (pool buffers, variables) binds
    the compiled entry point; one that reads host data keeps numba's dispatcher, which checks
    the types of what the user passed (a read-only array here)."""
    import numba

    m = build_mlp(8)
    session = popxl.Session(m.ir, backend="numba", compile_in_background=False)
    names = session.executable.compiled.fn.__globals__
    assert not isinstance(names["j_bias_gelu"], numba.core.dispatcher.Dispatcher)
    assert not isinstance(names["j_scaled_add_"], numba.core.dispatcher.Dispatcher)
    assert isinstance(names["j_softmax_nll"], numba.core.dispatcher.Dispatcher)  # reads labels
    (x, y), = mnist_batches(8, 1)
    y.flags.writeable = False
    ref = build_mlp(8)
    reference = popxl.Session(ref.ir, backend="numpy")
    with session, reference:
        got = session.run({m.images: x, m.labels: y})[m.out]
        want = reference.run({ref.images: x, ref.labels: y})[ref.out]
    np.testing.assert_allclose(got, want, **TOLERANCE["float32"])


def test_bias_adds_run_as_loops_with_numpys_bits() -> None:
    """``add`` where the second operand repeats over the first's rows (or has its shape) runs
    as one compiled loop, with numpy's bits; other broadcasts and integer adds keep numpy."""
    rng = np.random.default_rng(5)
    got = []
    for backend in ("numba", "numpy"):
        ir = popxl.Ir()
        with ir.main_graph:
            x = ops.host_load(xs := popxl.h2d_stream((4, 6, 5), popxl.float32, "x"))
            bias = popxl.variable(rng.normal(size=(5,)), popxl.float32, name="bias")
            rows = popxl.variable(rng.normal(size=(1, 6, 5)), popxl.float32, name="rows")
            col = popxl.variable(rng.normal(size=(4, 1, 1)), popxl.float32, name="col")
            n = ops.host_load(ns := popxl.h2d_stream((3,), popxl.int32, "n"))
            for i, t in enumerate((x + bias, x + rows, x + x, x + col, n + n)):
                ops.host_store(popxl.d2h_stream(t.shape, t.dtype, f"o{i}"), t)
        session = popxl.Session(ir, backend=backend, compile_in_background=False)
        if backend == "numba":
            assert session.source.count("j_add(") == 3  # not the column or the integers
        with session:
            got.append(session.run({xs: rng.normal(size=(4, 6, 5)).astype(np.float32),
                                    ns: np.arange(3, dtype=np.int32)}))
        rng = np.random.default_rng(5)
    for a, b in zip(got[0].values(), got[1].values()):
        assert a.tobytes() == b.tobytes()


def test_device_loop_views_of_variables_updated_in_place_are_made_once() -> None:
    """In a device loop the weights are updated in place, so a view of one (the transposed
    ``W1`` of the backward pass) is made when the step is generated, on either backend; it
    follows the updates: training on numba matches numpy run for run."""
    got = []
    for backend in ("numba", "numpy"):
        m = build_mlp(8, loop=5)
        session = popxl.Session(m.ir, backend=backend, compile_in_background=False)
        assert "a transpose view of w" in session.source  # either backend
        batches = mnist_batches(8, 15)
        with session:
            for k in range(0, 15, 5):
                got.append(session.run({m.images: np.stack([x for x, _ in batches[k:k + 5]]),
                                        m.labels: np.stack([y for _, y in batches[k:k + 5]])}
                                       )[m.out])
    np.testing.assert_allclose(got[:3], got[3:], **TOLERANCE["float32"])


def test_large_and_in_place_adds_run_as_loops_with_numpys_bits() -> None:
    """A GPT-2-sized bias add and the residual adds after it (in place on either operand's
    buffer) run as the compiled loop, with the numpy backend's bits."""
    rng = np.random.default_rng(7)
    data = rng.normal(size=(64, 768)).astype(np.float32)
    data[0, :3] = (np.nan, np.inf, -0.0)
    bias = rng.normal(size=(768,))
    got = []
    for backend in ("numba", "numpy"):
        ir = popxl.Ir()
        with ir.main_graph, popxl.in_sequence():
            x = ops.host_load(xs := popxl.h2d_stream((64, 768), popxl.float32, "x"))
            b = popxl.variable(bias, popxl.float32, name="b")
            h = ops.exp(x) + b
            r = x + h  # written over h's buffer
            r = r + ops.exp(r)
            ops.host_store(popxl.d2h_stream(r.shape, r.dtype, "r"), r)
        session = popxl.Session(ir, backend=backend, compile_in_background=False)
        if backend == "numba":
            assert len(re.findall(r"j_add\d*\(", session.source)) == 3  # in a segment or not
            assert "o_add(" not in session.source
        with session:
            got.append(session.run({xs: data}))
    for a, b in zip(got[0].values(), got[1].values()):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("last_eps", [1e-5, 1e-3])
def test_repeated_layers_share_one_compiled_segment(last_eps: float) -> None:
    """Three residual blocks, each a segment between host stores: the second and third are
    the same calls on arrays of the same types, so they run one compiled function, unless a
    constant differs (the third's LayerNorm epsilon); the first reads the host's array.
    Results equal the numpy backend's within the tolerance."""
    def build() -> tuple[popxl.Ir, list]:
        rng = np.random.default_rng(3)
        ir = popxl.Ir()
        with ir.main_graph, popxl.in_sequence():
            x = ops.host_load(popxl.h2d_stream((2, 16), popxl.float32, "x"))
            for i, eps in enumerate((1e-5, 1e-5, last_eps)):
                w = popxl.variable((rng.normal(size=(16, 16)) * 0.3).astype(np.float32))
                b = popxl.variable(rng.normal(size=16).astype(np.float32))
                g = popxl.variable(np.ones(16, np.float32))
                beta = popxl.variable(np.zeros(16, np.float32))
                x = x + ops.gelu(ops.layer_norm(x, g, beta, eps=eps) @ w + b)
                ops.host_store(popxl.d2h_stream(x.shape, x.dtype, f"y{i}"), x)
        return ir, ir.h2d_streams

    data = np.random.default_rng(4).normal(size=(2, 16)).astype(np.float32)
    results, sessions = {}, {}
    for backend in ("numba", "numpy"):
        ir, (xs,) = build()
        session = sessions[backend] = popxl.Session(ir, backend=backend,
                                                    compile_in_background=False)
        with session:
            results[backend] = [session.run({xs: data})[s] for s in ir.d2h_streams]
    compiled = sessions["numba"].executable.compiled
    fns = [compiled.fn.__globals__[n] for n in re.findall(r"^    (g\d+)\(", compiled.source, re.M)]
    assert len(fns) == 3 and fns[0] is not fns[1]
    assert (fns[1] is fns[2]) == (last_eps == 1e-5)
    for got, want in zip(results["numba"], results["numpy"]):
        np.testing.assert_allclose(got, want, **TOLERANCE["float32"])
