"""Every float16 var-update op under 1, 2 and 4 replicas, compiled on the numpy and numba
backends, bit for bit against the interpreter: float16 optimiser state (Adam's first moment,
momentum buffers, accumulators), mixed with float32 where PopXL programs mix them (Adam's
second moment, the weight, a float32 step counter), values that differ per replica, and values
past float16's range and below its normal range."""

from __future__ import annotations

import importlib.util
from functools import partial

import numpy as np
import pytest

import xlgraph as popxl
import xlgraph.addons as addons
from xlgraph import ops
from xlgraph.ops import var_updates as vu

HAS_NUMBA = importlib.util.find_spec("numba") is not None
BACKENDS = ["numpy", pytest.param("numba", marks=pytest.mark.skipif(
    not HAS_NUMBA, reason="the numba backend needs numba (xlgraph[fast])"))]
F16, F32 = popxl.float16, popxl.float32
SHAPE = (4, 64)


def _updates(ir: popxl.Ir, new, x16: popxl.Tensor, x32: popxl.Tensor) -> list[popxl.Tensor]:
    """Each var-update op on fresh variables made by ``new(dtype)``; the results that are not
    variables (the updaters' terms), to store."""
    step = popxl.variable(np.float32(0), F32, "step")
    step16 = popxl.variable(np.float16(2), F16, "step16")
    vu.accumulate_(new(F16), x16)
    vu.accumulate_(new(F16), x16, 0.3)
    vu.copy_var_update_(new(F16), x16 * 3.0)
    vu.accumulate_square_(new(F16), x16, 0.5)
    vu.accumulate_mean_(new(F16), x16, step16)
    vu.accumulate_moving_average_(new(F16), x16, 0.9)
    vu.accumulate_moving_average_(new(F16), x32, 0.9)  # a float32 gradient, cast
    vu.accumulate_moving_average_square_(new(F16), x16, 0.999)
    vu.accumulator_scale_(new(F16), 0.5)
    vu.accumulator_zero_(new(F16))
    vu.sparse_accumulate_(new(F16), x16[:2], popxl.constant(np.array([3, 1], np.int32)), 0,
                          0.5)
    ops.scaled_add_(new(F16), x16, a=0.9, b=-0.25)
    # Adam as the data-parallel tutorial has it: float16 first moment, the rest float32
    m, v, w = new(F16), new(F32), new(F32)
    vu.accumulate_moving_average_(m, x32, 0.9)
    vu.accumulate_moving_average_square_(v, x32, 0.999)
    terms = [vu.adam_updater(m, v, w, step, 1e-2, 0.9, 0.999, 1e-5)]
    vu.adam_var_update(w, terms[-1], learning_rate=1e-3)
    m, v = new(F32), new(F32)  # all float32 (kernels with scratch arrays, over replicas)
    vu.accumulate_moving_average_(m, x32, 0.9)
    vu.accumulate_moving_average_square_(v, x32, 0.999)
    terms.append(vu.adam_updater(m, v, None, step, None, 0.9, 0.999, 1e-5))
    m, v, w = new(F16), new(F16), new(F16)  # all float16
    vu.accumulate_moving_average_(m, x16, 0.9)
    vu.accumulate_moving_average_square_(v, x16, 0.999)
    terms.append(vu.adam_updater(m, v, w, None, None, epsilon=1e-3))
    vu.adam_var_update(w, terms[-1], learning_rate=1e-3)
    m, v, w = new(F16), new(F16), new(F16)
    terms.append(vu.lamb_updater(m, v, w, popxl.variable(np.float16(0), F16), 0.01, 0.9, 0.999,
                                 1e-3))
    vu.adam_var_update(w, terms[-1], ops.lamb_square(w), ops.lamb_square(terms[-1]), 1e-3, 10.0)
    terms.append(vu.adamax_updater(new(F16), new(F16), new(F16),
                                   popxl.variable(np.float32(0), F32), 0.01, 0.9, 1e-3))
    vu.sgd_momentum_(new(F16), x16, new(F16), popxl.variable(np.float16(2), F16), 0.9, 0.1,
                     1e-2)
    buf = new(F16)
    vu.sgd_momentum_(buf, x16, momentum=0.9)
    vu.sgd_update_(new(F16), x16, 0.01, buf, momentum=0.9, weight_decay=1e-2)
    vu.sgd_update_(new(F16), x16, 0.01)
    vu.accumulate_(step, popxl.constant(np.float32(1)))
    return terms


def _build(replicas: int):
    """The program and its streams: variables hold different values on each replica."""
    ir = popxl.Ir(replication=replicas)
    rng = np.random.default_rng(replicas)
    grouping = ir.replica_grouping(group_size=1)
    lead = (replicas,) if replicas > 1 else ()

    def new(dtype) -> popxl.Tensor:  # noqa: ANN001
        data = rng.normal(size=lead + SHAPE) * 10.0 ** rng.integers(-6, 4, lead + SHAPE)
        data.reshape(-1)[:4] = [65000.0, -65000.0, 6e-8, 1e-5]  # the range's edges
        data = np.abs(data) if dtype is F32 else data  # Adam's float32 second moment
        return popxl.variable(data.astype(dtype.as_numpy()), dtype, replica_grouping=grouping,
                              retrieval_mode="all_replicas")

    with ir.main_graph, popxl.in_sequence():
        s16 = popxl.h2d_stream(SHAPE, F16, "x16")
        s32 = popxl.h2d_stream(SHAPE, F32, "x32")
        terms = _updates(ir, new, ops.host_load(s16), ops.host_load(s32))
        outs = []
        for i, t in enumerate(terms):
            s = popxl.d2h_stream(t.shape, t.dtype, f"term{i}")
            ops.host_store(s, t)
            outs.append(s)
    return ir, (s16, s32), outs


def _feeds(replicas: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    lead = (replicas,) if replicas > 1 else ()
    feeds = []
    for _ in range(2):
        x = rng.normal(size=lead + SHAPE) * 10.0 ** rng.integers(-7, 5, lead + SHAPE)
        x.reshape(-1)[:3] = [70000.0, 3e-8, -60000.0]  # to infinity, subnormal, near the edge
        feeds.append({"x16": x.astype(np.float16), "x32": x.astype(np.float32)})
    return feeds


def _run(replicas: int, **kwargs) -> list[np.ndarray]:
    ir, (s16, s32), outs = _build(replicas)
    got = []
    session = popxl.Session(ir, compile_in_background=False, **kwargs)
    with session:
        for feed in _feeds(replicas):
            out = session.run({s16: feed["x16"], s32: feed["x32"]})
            got.extend(np.array(out[s]) for s in outs)
        got.extend(np.array(a) for a in session.get_tensors_data(
            ir.main_graph.variables).values())
    return got


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("replicas", [1, 2, 4])
def test_float16_var_updates_match_the_interpreter(replicas: int, backend: str) -> None:
    with np.errstate(all="ignore"):
        expected = _run(replicas, optimize=False)
        got = _run(replicas, backend=backend)
    assert len(got) == len(expected) > 30
    assert any(np.isinf(a).any() for a in got)  # past the range: the overflows are compared
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.dtype == e.dtype and g.shape == e.shape, i
        assert g.tobytes() == e.tobytes(), f"output {i} differs"


@pytest.mark.parametrize("backend", BACKENDS)
def test_float32_weight_takes_a_float16_update_in_float32(backend: str) -> None:
    """``scaled_add_(w, u, a, b)`` with a float32 ``w`` and a float16 ``u`` (PopART's updater
    takes the first moment's dtype): ``a w + b u`` in float32, rounded as numpy rounds each
    float32 operation; ``scaled_add`` likewise."""
    rng = np.random.default_rng(0)
    w0 = rng.normal(size=SHAPE).astype(np.float32)
    u = (rng.normal(size=SHAPE) * 10.0 ** rng.integers(-6, 5, SHAPE)).astype(np.float16)
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        w, w1 = popxl.variable(w0, F32, "w"), popxl.variable(w0, F32, "w1")
        s = popxl.h2d_stream(SHAPE, F16, "u")
        x = ops.host_load(s)
        ops.scaled_add_(w, x, b=-1e-3)
        ops.scaled_add_(w1, x * 2.0, a=0.9, b=0.3)
        out = popxl.d2h_stream(SHAPE, F32, "sum")
        ops.host_store(out, ops.scaled_add(w, x, a=1.5, b=-2.0))
    with popxl.Session(ir, backend=backend, compile_in_background=False) as session:
        got = session.run({s: u})[out]
        w_got, w1_got = session.get_tensor_data(w), session.get_tensor_data(w1)
    f32 = np.float32
    wide = u.astype(f32)
    w_want = w0 + wide * f32(-1e-3)
    u2 = (wide * f32(2.0)).astype(np.float16).astype(f32)
    assert w_got.tobytes() == w_want.tobytes()
    assert w1_got.tobytes() == (w0 * f32(0.9) + u2 * f32(0.3)).tobytes()
    assert got.tobytes() == (w_want * f32(1.5) + wide * f32(-2.0)).tobytes()


class _Adam(addons.Module):
    """The data-parallel tutorial's Adam: a float16 (or float32) first moment, float32 second
    moment and step counter, the module's own variables."""

    @popxl.in_sequence(True)
    def build(self, weight: popxl.TensorByRef, grad: popxl.Tensor, first_order_dtype) -> None:  # noqa: ANN001
        first = self.add_variable_input("first_order", partial(np.zeros, weight.shape),
                                        first_order_dtype, by_ref=True)
        vu.accumulate_moving_average_(first, grad, f=0.9)
        second = self.add_variable_input("second_order", partial(np.zeros, weight.shape), F32,
                                         by_ref=True)
        vu.accumulate_moving_average_square_(second, grad, f=0.999)
        step = self.add_variable_input("step", partial(np.zeros, ()), F32, by_ref=True)
        update = vu.adam_updater(first, second, weight=weight, weight_decay=0.0, time_step=step,
                                 beta1=0.9, beta2=0.999, epsilon=1e-5)
        ops.scaled_add_(weight, update, b=-1e-2)


@pytest.mark.parametrize("first_order", [F16, F32])
@pytest.mark.parametrize("backend", BACKENDS)
def test_data_parallel_tutorials_adam_matches_the_interpreter(backend: str, first_order) -> None:  # noqa: ANN001
    """Two replicas, gradients averaged, the tutorial's Adam ``Module`` per weight (the program
    that stopped with ``_updater() got an unexpected keyword argument 'scratch'``)."""
    rng = np.random.default_rng(1)
    w0 = rng.normal(size=(16, 8)).astype(np.float32)
    grads = [rng.normal(size=(2, 16, 8)).astype(np.float32) * 1e-3 for _ in range(3)]

    def run(**kwargs) -> list[np.ndarray]:
        ir = popxl.Ir(replication=2)
        with ir.main_graph, popxl.in_sequence():
            w = popxl.variable(w0, F32, "w")
            s = popxl.h2d_stream((16, 8), F32, "grad")  # each replica's own gradient
            grad = ops.collectives.replicated_all_reduce(ops.host_load(s), "mean")
            facts, opt = _Adam().create_graph(w, grad.spec, first_order_dtype=first_order)
            state = facts.init()
            opt.bind(state).call(w, grad)
        with popxl.Session(ir, compile_in_background=False, **kwargs) as session:
            for feed in grads:
                session.run({s: feed})
            return [np.array(a) for a in session.get_tensors_data(
                [w, *state.tensors]).values()]

    expected, got = run(optimize=False), run(backend=backend)
    assert expected[0].tobytes() != w0.tobytes()  # it trained
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.tobytes() == e.tobytes()
