"""One Adam(W) update of a variable as one compiled loop (``xlgraph.lower.adam_chains``): the
moments, the update term and the weight of ``AdamOptimizerStep`` programs, bit for bit against
the interpreter, with the loop in the generated step where it applies."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops
from xlgraph.addons.optimizers import AdamOptimizerStep
from xlgraph.ops import var_updates as vu

pytestmark = pytest.mark.skipif(importlib.util.find_spec("numba") is None,
                                reason="the compiled loops need numba (xlgraph[fast])")
F16, F32 = popxl.float16, popxl.float32
SHAPE = (24, 40)
W0 = np.random.default_rng(2).normal(size=SHAPE).astype(np.float32)


def _grads(replicas: int, steps: int = 3) -> list[np.ndarray]:
    """Gradients over many magnitudes, with zeros, per replica when ``replicas`` > 1."""
    rng = np.random.default_rng(5)
    lead = (replicas,) if replicas > 1 else ()
    out = []
    for _ in range(steps):
        g = rng.normal(size=lead + SHAPE) * 10.0 ** rng.integers(-9, 3, lead + SHAPE)
        g.reshape(-1)[:4] = [0.0, -0.0, 1e-30, 3e4]
        out.append(g.astype(np.float32))
    return out


def _adam_ops(w, m, v, step, grad, decay: float = 0.01):  # noqa: ANN001, ANN202
    """AdamW written with ``ops.var_updates`` in ``AdamOptimizerStep``'s order; the term."""
    vu.accumulate_moving_average_(m, grad, f=0.9)
    vu.accumulate_moving_average_square_(v, grad, f=0.999)
    term = vu.adam_updater(m, v, weight=w, weight_decay=decay, time_step=step, beta1=0.9,
                           beta2=0.999, epsilon=1e-8)
    ops.scaled_add_(w, term, b=-1e-3)
    return term


def _variables() -> list[popxl.Tensor]:
    """The weight, both moments and the step count (float32)."""
    zeros = np.zeros(SHAPE, np.float32)
    return [popxl.variable(W0, F32, "w"), popxl.variable(zeros, F32, "m"),
            popxl.variable(zeros, F32, "v"), popxl.variable(np.float32(0), F32, "step")]


def _adam_program(replicas: int = 1, **adam) -> tuple:
    """A weight updated by ``AdamOptimizerStep`` from a loaded gradient (averaged over the
    replicas). Returns ``(ir, gradient stream, the tensors to compare)``."""
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph, popxl.in_sequence():
        w = popxl.variable(W0, F32, "w")
        stream = popxl.h2d_stream(SHAPE, F32, "grad")
        grad = ops.host_load(stream)
        if replicas > 1:
            grad = ops.collectives.replicated_all_reduce(grad, "mean")
        facts, opt = AdamOptimizerStep(cache=True).create_graph(
            w, grad.spec, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, **adam)
        state = facts.init()
        opt.bind(state).call(w, grad)
    return ir, stream, [w, *state.tensors]


def _loop_program() -> tuple:
    """AdamW twice per run in a device loop, the weight, moments and count passed by
    reference into its body."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        variables = _variables()
        stream = popxl.h2d_stream(SHAPE, F32, "grad")
        grad = ops.host_load(stream)
        body = ir.create_empty_graph("adam_twice")
        with body, popxl.in_sequence():
            g = popxl.graph_input(SHAPE, F32, "g")
            refs = [popxl.graph_input(t.shape, t.dtype, t.name, by_ref=True)
                    for t in variables]
            _adam_ops(*refs, g * 0.5)
            popxl.graph_output(g)
        ops.repeat(body, 2, grad, inputs_dict=dict(zip(refs, variables)))
    return ir, stream, variables


def _run(build: tuple, replicas: int, **kwargs) -> tuple[list[bytes], str]:
    ir, stream, tensors = build
    with popxl.Session(ir, compile_in_background=False, **kwargs) as session:
        for g in _grads(replicas):
            session.run({stream: g})
        data = session.get_tensors_data(tensors)
        return [np.asarray(data[t]).tobytes() for t in tensors], session.source


CASES = {  # name: (replicas, AdamOptimizerStep's options, whether the one loop applies)
    "adamw": (1, {"weight_decay": 0.01, "first_order_dtype": F32}, True),
    "adam": (1, {"weight_decay": 0.0, "first_order_dtype": F32}, True),
    "loss_scaled": (1, {"weight_decay": 0.01, "first_order_dtype": F32, "loss_scaling": 128.0},
                    True),
    "float16_first_moment": (1, {"weight_decay": 0.01, "first_order_dtype": F16}, True),
    "two_replicas": (2, {"weight_decay": 0.01, "first_order_dtype": F32}, True),
}


def _check(build: tuple, replicas: int, fused: bool) -> None:
    """Three runs on both backends give the interpreter's bytes; the compiled step runs the
    chain as one loop where ``fused``."""
    expected, _ = _run(build, replicas, optimize=False)
    got, source = _run(build, replicas, backend="numba")
    numpy_got, numpy_source = _run(build, replicas, backend="numpy")
    assert ("j_adam_step(" in source) == fused
    assert "adam_step" not in numpy_source
    assert got == expected == numpy_got
    assert expected[0] != W0.tobytes()  # it trained


@pytest.mark.parametrize("case", CASES)
def test_adam_optimizer_step_matches_the_interpreter_bit_for_bit(case: str) -> None:
    replicas, adam, fused = CASES[case]
    _check(_adam_program(replicas, **adam), replicas, fused)


def test_adam_in_a_device_loop_matches_the_interpreter_bit_for_bit() -> None:
    _check(_loop_program(), 1, True)


def test_a_term_read_elsewhere_keeps_the_four_steps() -> None:
    """The update term stored to the host: the chain's loop would not write it, so the four
    steps run as before; the results are the interpreter's."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        variables = _variables()
        stream = popxl.h2d_stream(SHAPE, F32, "grad")
        term = _adam_ops(*variables, ops.host_load(stream))
        ops.host_store(popxl.d2h_stream(SHAPE, F32, "term"), term)
    _check((ir, stream, variables), 1, False)


def test_adam_ops_written_out_run_as_one_loop() -> None:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        variables = _variables()
        stream = popxl.h2d_stream(SHAPE, F32, "grad")
        _adam_ops(*variables, ops.host_load(stream))
    _check((ir, stream, variables), 1, True)
