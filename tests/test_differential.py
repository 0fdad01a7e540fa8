"""Randomised differential tests: the optimised Session against the interpreter, bit for bit.

A seeded generator builds programs from elementwise chains, matmuls, reductions, views, in-place
updates (of variables, intermediates and views), constants that fold, subgraph calls (inlined,
and repeated ones large enough to become compiled functions), repeat loops and conditionals.
Each program runs twice in both paths; every output and variable must match byte for byte, and
the buffer plan must never give one buffer to two values that are live at the same time.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops
from xlgraph.lower.backends import TOLERANCE
from xlgraph.lower.plan import Plan
from xlgraph.lower.program import walk

F32 = popxl.float32
SEEDS = range(int(__import__("os").environ.get("XL_SEEDS", 60)))


class Gen:
    """Builds random ops on a pool of tensors of the current graph."""

    def __init__(self, rng: np.random.Generator, ir: popxl.Ir) -> None:
        self.rng = rng
        self.ir = ir
        self.pool: list[popxl.Tensor] = []
        self.in_main = True

    def pick(self, want: Callable[[popxl.Tensor], bool] = lambda t: True) -> popxl.Tensor | None:
        found = [t for t in self.pool if want(t) and t.dtype is F32]
        if not found:
            return None
        return found[-1] if self.rng.random() < 0.5 else found[self.rng.integers(len(found))]

    def last(self, like: popxl.Tensor) -> popxl.Tensor:
        """The newest tensor of the pool with ``like``'s spec (``like`` if none)."""
        return next((t for t in reversed(self.pool) if t.spec == like.spec), like)

    def add(self, t: popxl.Tensor | None) -> None:
        if t is not None and t.dtype is F32 and 0 < t.nelms <= 1200:
            self.pool.append(t)

    def const(self, shape: tuple[int, ...]) -> popxl.Tensor:
        return popxl.constant(self.rng.uniform(-1, 1, shape).astype(np.float32))

    def partner(self, t: popxl.Tensor) -> Any:
        """A second operand for ``t``: same shape, a broadcast row, or a Python scalar."""
        kind = self.rng.integers(4)
        if kind == 0:
            return float(self.rng.uniform(-2, 2))
        if kind == 1 and t.rank >= 1:
            row = self.pick(lambda u: u.shape == t.shape[-1:])
            return row if row is not None else self.const(t.shape[-1:])
        same = self.pick(lambda u: u.shape == t.shape)
        return same if same is not None else self.const(t.shape)

    # -- op builders: each returns the new tensor (or None) --------------------------------------
    def unary(self, x: popxl.Tensor) -> popxl.Tensor:
        fns = [ops.tanh, ops.gelu, ops.relu, ops.negate, ops.abs, ops.sin,
               lambda t: ops.exp(ops.tanh(t))]
        return fns[self.rng.integers(len(fns))](x)

    def binary(self, x: popxl.Tensor) -> popxl.Tensor:
        y = self.partner(x)
        fns = [ops.add, ops.sub, ops.mul, lambda a, b: a / (ops.abs(a * 0.0 + b) + 1.0)]
        return fns[self.rng.integers(len(fns))](x, y)

    def matmul(self, x: popxl.Tensor) -> popxl.Tensor | None:
        if x.rank != 2:
            return None
        w = self.pick(lambda u: u.rank == 2 and u.shape[0] == x.shape[1])
        if w is None or self.rng.random() < 0.3:
            w = self.const((x.shape[1], int(self.rng.choice([8, 16, 24]))))
        return x @ w

    def reduce(self, x: popxl.Tensor) -> popxl.Tensor:
        fn = [ops.sum, ops.max, ops.min, ops.mean][self.rng.integers(4)]
        axis = None if x.rank == 0 else int(self.rng.integers(x.rank))
        return fn(x, axis, keepdims=bool(self.rng.integers(2)))

    def view(self, x: popxl.Tensor) -> popxl.Tensor | None:
        kind = self.rng.integers(5)
        if kind == 0:
            return x.reshape((-1,)) if x.rank != 1 else x.reshape((1, -1))
        if kind == 1 and x.rank == 2:
            return x.T
        if kind == 2 and x.rank >= 1 and x.shape[0] > 1:
            return ops.slice(x, start=1, stop=x.shape[0], step=int(self.rng.integers(1, 3)), axis=0)
        if kind == 3 and x.rank == 1:
            return ops.expand(x, (12,) + x.shape)
        if kind == 4 and x.rank == 2:
            return ops.slice_(x, start=0, stop=1, axis=0)
        return None

    def inplace(self, x: popxl.Tensor) -> popxl.Tensor | None:
        kind = self.rng.integers(5)
        if kind == 0:
            return ops.relu_(x)
        y = self.pick(lambda u: u.shape == x.shape and u is not x)
        if y is None:
            return None
        if kind == 1:
            return ops.add_(x, y)
        if kind == 2:
            return ops.scaled_add_(x, y, a=float(self.rng.choice([1.0, 0.5])), b=-0.25)
        if kind == 3:
            return ops.var_updates.accumulate_(x, y, f=float(self.rng.choice([1.0, 0.3])))
        zeros = ops.init(x.shape, F32)  # folds to a constant that must be fresh every time
        return ops.var_updates.accumulate_(zeros, y)

    def misc(self, x: popxl.Tensor) -> popxl.Tensor | None:
        kind = self.rng.integers(3)
        if kind == 0 and x.rank == 2:
            return ops.softmax(x, axis=-1)
        if kind == 1:
            c = self.const(x.shape)
            return x + (ops.tanh(c) * 2.0 - c)  # a constant expression to fold
        if kind == 2 and x.rank >= 1:
            return ops.concat([x, x * 0.5], axis=0)
        return None

    def step(self) -> None:
        x = self.pick()
        if x is None:
            return
        builders = [self.unary, self.binary, self.matmul, self.reduce, self.view, self.inplace,
                    self.misc, self.unary, self.binary]
        if self.in_main:
            builders += [self.call, self.loop, self.cond]
        self.add(builders[self.rng.integers(len(builders))](x))

    # -- subgraphs ---------------------------------------------------------------------------
    def subgraph(self, specs: list[popxl.TensorSpec], n_ops: int,
                 outs: Callable[[list[popxl.Tensor]], list[popxl.Tensor]]) -> popxl.Graph:
        outer, self.pool, self.in_main = self.pool, [], False

        def fn(*xs: popxl.Tensor) -> list[popxl.Tensor]:
            with popxl.in_sequence():
                self.pool.extend(xs)
                for _ in range(n_ops):
                    self.step()
                return outs(list(xs))

        try:
            return self.ir.create_graph(fn, *specs)
        finally:
            self.pool, self.in_main = outer, True

    def call(self, x: popxl.Tensor) -> popxl.Tensor:
        big = self.rng.random() < 0.3  # big enough, and called twice: a compiled function
        g = self.subgraph([x.spec], 18 if big else 4,
                          lambda xs: [self.pool[-1], self.last(xs[0]) * 2.0])
        first = ops.call(g, x)
        for _ in range(1 if big else int(self.rng.integers(2))):
            first = ops.call(g, first[1])
        self.add(first[1])
        return first[0]

    def loop(self, x: popxl.Tensor) -> popxl.Tensor:
        by_ref = self.rng.random() < 0.4

        def body(xs: list[popxl.Tensor]) -> list[popxl.Tensor]:
            y = ops.tanh(self.last(xs[0]))
            if by_ref:
                ops.var_updates.accumulate_(xs[0], y * 0.5)
            return [y]

        def graph() -> popxl.Graph:
            if not by_ref:
                return self.subgraph([x.spec], 3, body)
            outer, self.pool, self.in_main = self.pool, [], False
            try:
                def fn() -> list[popxl.Tensor]:
                    with popxl.in_sequence():
                        t = popxl.graph_input(x.shape, F32, "t", by_ref=True)
                        self.pool.append(t)
                        return body([t])
                return self.ir.create_graph(fn)
            finally:
                self.pool, self.in_main = outer, True

        return ops.repeat(graph(), int(self.rng.integers(1, 4)), x)[0]

    def cond(self, x: popxl.Tensor) -> popxl.Tensor:
        flag = ops.greater(ops.sum(x), popxl.constant(0.0, F32))
        then = self.subgraph([x.spec], 3, lambda xs: [ops.tanh(self.last(xs[0]) * 1.0 + xs[0])])
        other = self.subgraph([x.spec], 2, lambda xs: [xs[0] - 1.0])
        return ops.conditional(flag, then, other, [x], [x])[0]


def build(seed: int):
    rng = np.random.default_rng(seed)
    ir = popxl.Ir()
    gen = Gen(rng, ir)
    feeds: dict[Any, np.ndarray] = {}
    with ir.main_graph, popxl.in_sequence():
        for i, shape in enumerate([(16, 24), (24,), (24, 24)][: 1 + rng.integers(3)]):
            s = popxl.h2d_stream(shape, F32, f"in{i}")
            feeds[s] = rng.uniform(-1, 1, shape).astype(np.float32)
            gen.add(ops.host_load(s))
        variables = [popxl.variable(rng.uniform(-1, 1, shape).astype(np.float32), F32, f"v{i}")
                     for i, shape in enumerate([(16, 24), (24, 16), (24,)])]
        for v in variables:
            gen.add(v)
        for _ in range(int(rng.integers(8, 30))):
            gen.step()
        for i in range(3):
            t = gen.pick()
            ops.host_store(popxl.d2h_stream(t.shape, t.dtype, f"out{i}"), t)
    return ir, feeds, variables


def run_both(seed: int, backend: str = "numpy") -> tuple[popxl.Session, list[np.ndarray],
                                                         list[np.ndarray]]:
    """The optimised Session on ``backend`` and the interpreter: outputs of two runs, then the
    variables."""
    results, sessions = [], []
    for optimize in (True, False):
        ir, feeds, variables = build(seed)
        session = popxl.Session(ir, optimize=optimize, backend=backend,
                                compile_in_background=False)
        got = []
        with session:
            for _ in range(2):
                got += list(session.run(feeds).values())
        got += [session.get_tensor_data(v) for v in variables]
        results.append(got)
        sessions.append(session)
    return sessions[0], results[0], results[1]


def assert_plan_invariant(plan: Plan, program_steps: list) -> None:
    """No two values that are live at the same time share a buffer (a fused elementwise op may
    write its output where its dying input was); scratch buffers hold nothing live."""
    by_buffer: dict[int, list[tuple[int, int, int]]] = {}
    for root, buf in plan.buffer_of.items():
        start = plan.defined[root]
        by_buffer.setdefault(buf, []).append((start, max(plan.last_use.get(root, start), start),
                                              root))
    for spans in by_buffer.values():
        spans.sort()
        for (_, e0, r0), (s1, _, r1) in zip(spans, spans[1:]):  # sorted: neighbours suffice
            assert e0 < s1 or (e0 == s1 and plan.fused_into.get(r0) == r1), (r0, r1, spans)
    for s in walk(program_steps):
        pos = plan.positions[s]
        for buf in plan.scratch.get(s, []):
            for start, end, root in by_buffer.get(buf, []):
                assert not start <= pos <= end, (buf, root)


@pytest.mark.parametrize("seed", SEEDS)
def test_optimised_matches_interpreter_bit_for_bit(seed: int) -> None:
    session, optimised, interpreted = run_both(seed)
    assert len(optimised) == len(interpreted)
    for i, (a, b) in enumerate(zip(optimised, interpreted)):
        assert a.tobytes() == b.tobytes(), f"seed {seed}: result {i} differs\n{session.source}"
    ex = session.executable
    assert_plan_invariant(ex.plans[ex.program], ex.program.steps)
    for fn in ex.program.functions:
        assert_plan_invariant(ex.plans[fn], fn.steps)


@pytest.mark.skipif(importlib.util.find_spec("numba") is None, reason="needs the fast extra")
@pytest.mark.parametrize("seed", SEEDS)
def test_compiled_backend_matches_interpreter_within_its_tolerance(seed: int) -> None:
    """The numba backend's loops may round ``exp`` and row sums differently in the last bits
    (see ``xlgraph.lower.backends.TOLERANCE``); everything else must agree to that tolerance."""
    session, compiled, interpreted = run_both(seed, backend="numba")
    for i, (a, b) in enumerate(zip(compiled, interpreted)):
        np.testing.assert_allclose(a, b, **TOLERANCE[a.dtype.name],
                                   err_msg=f"seed {seed}: result {i}\n{session.source}")


def test_generator_covers_the_lowering_features() -> None:
    """The seeds above exercise fusion, folding, functions, loops, branches and copies."""
    seen: set[str] = set()
    for seed in SEEDS:
        ir, _, _ = build(seed)
        ex = popxl.Session(ir).executable
        plan = ex.plans[ex.program]
        steps = list(ex.program.walk())
        seen.update(s.kind for s in steps)
        seen.update(["fused"] if plan.fused else [])
        seen.update(["copy"] if any(s.copy_out and s.kind != "cond" for s in steps) else [])
        seen.update(["function"] if ex.program.functions else [])
        seen.update(["pool"] if plan.buffer_of else [])
    assert {"fused", "copy", "function", "pool", "loop", "cond", "const", "ref"} <= seen
