"""Property-based differential fuzzing (Hypothesis) on top of ``test_differential``'s generator.

Hypothesis makes every choice of the program generator (so failures shrink to small programs)
and adds what the seeded generator lacks: unused inputs, loop-carried values that are never
read, constants and ``init``s above the folding limit, ``repeat``/``conditional``/``call``
nested inside each other, several host loads and stores per stream (``num_host_transfers`` > 1),
in-place ops on views, and bad run inputs. The property: the optimised Session and the
interpreter agree byte for byte on every output and variable, or both refuse with the same
error type and message.

CI runs a fixed, derandomised budget (``XL_FUZZ_EXAMPLES``, default 150); set it higher for a
longer search, e.g. ``XL_FUZZ_EXAMPLES=2000 pytest tests/test_differential_fuzz.py``.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_differential import F32, Gen

import xlgraph as popxl
from xlgraph import ops

EXAMPLES = int(os.environ.get("XL_FUZZ_EXAMPLES", 150))
BIG = (520, 520)  # float32: just above the 1 MiB constant-folding limit


class DrawnRng:
    """The part of ``np.random.Generator`` that ``Gen`` uses, with Hypothesis making each
    choice; arrays come from a numpy generator seeded by one drawn integer."""

    def __init__(self, data: st.DataObject) -> None:
        self.data = data
        self.arrays = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))

    def random(self) -> float:
        return self.data.draw(st.integers(0, 9)) / 10

    def integers(self, low: int, high: int | None = None) -> int:
        low, high = (0, low) if high is None else (low, high)
        return self.data.draw(st.integers(low, high - 1))

    def choice(self, items: list[Any]) -> Any:
        return self.data.draw(st.sampled_from(list(items)))

    def uniform(self, low: float = 0.0, high: float = 1.0, size: Any = None) -> Any:
        if size is None:
            return self.data.draw(st.sampled_from([low, high, (low + high) / 2, high / 3]))
        return self.arrays.uniform(low, high, size)


class FuzzGen(Gen):
    """``Gen`` with nested control flow and the extra features listed in the module docstring."""

    MAX_DEPTH = 3

    def __init__(self, rng: DrawnRng, ir: popxl.Ir) -> None:
        super().__init__(rng, ir)  # type: ignore[arg-type]
        self.depth = 0

    def step(self) -> None:
        x = self.pick()
        if x is None:
            return
        builders = [self.unary, self.binary, self.matmul, self.reduce, self.view, self.inplace,
                    self.misc, self.big, self.view_inplace]
        if self.depth < self.MAX_DEPTH:
            builders += [self.call, self.loop, self.cond, self.unread_carry, self.unused_input]
        builder = builders[self.rng.integers(len(builders))]
        event(f"{builder.__name__} at depth {self.depth}")
        self.add(builder(x))

    def subgraph(self, specs, n_ops, outs):  # noqa: ANN001, ANN201 - as in Gen, one level deeper
        self.depth += 1
        in_main = self.in_main
        try:
            return super().subgraph(specs, n_ops, outs)
        finally:
            self.depth -= 1
            self.in_main = in_main

    def big(self, x: popxl.Tensor) -> popxl.Tensor:
        """A constant or an ``init`` too large to fold, reduced into ``x``."""
        if self.rng.random() < 0.5:
            large = ops.init(BIG, F32)
        else:
            large = popxl.constant(self.rng.uniform(-1, 1, BIG).astype(np.float32))
        return x + ops.mean(large)

    def view_inplace(self, x: popxl.Tensor) -> popxl.Tensor | None:
        """An in-place op on an in-place view: it writes through to ``x``."""
        if x.rank != 2 or x.shape[0] < 2:
            return None
        view = ops.slice_(x, start=0, stop=x.shape[0] // 2, axis=0)
        if self.rng.random() < 0.5:
            ops.relu_(view)
        else:
            ops.add_(view, self.const(view.shape))
        return x * 1.0

    def unread_carry(self, x: popxl.Tensor) -> popxl.Tensor:
        """A repeat whose carried input its body never reads; ``x`` comes by ``inputs_dict``."""
        g = self.ir.create_graph(lambda carried, given: ops.tanh(given) * 0.5, x.spec, x.spec)
        start = popxl.constant(np.zeros(x.shape, np.float32))
        return ops.repeat(g, self.rng.integers(1, 3), start, inputs_dict={g.inputs[1]: x})[0]

    def unused_input(self, x: popxl.Tensor) -> popxl.Tensor:
        """A called graph with an input it never reads."""
        g = self.subgraph([x.spec, x.spec], 2, lambda xs: [xs[0] * 2.0])
        return ops.call(g, x, x * 3.0)[0]


def build_fuzzed(data: st.DataObject, replicas: int = 1,
                 ) -> tuple[popxl.Ir, dict[Any, np.ndarray], list[Any]]:
    rng = DrawnRng(data)
    ir = popxl.Ir(replication=replicas)
    transfers = rng.integers(1, 4)
    event(f"num_host_transfers={transfers}")
    ir.num_host_transfers = transfers
    gen = FuzzGen(rng, ir)
    feeds: dict[Any, np.ndarray] = {}
    lead = tuple(n for n in (transfers, replicas) if n > 1)
    with ir.main_graph, popxl.in_sequence():
        popxl.h2d_stream((4,), F32, "never_loaded")  # an unused input: not expected by run
        for i, shape in enumerate([(16, 24), (24,)][: rng.integers(1, 3)]):
            s = popxl.h2d_stream(shape, F32, f"in{i}")
            feeds[s] = rng.uniform(-1, 1, lead + shape).astype(np.float32)
            for _ in range(transfers):  # every transfer of the stream is loaded once
                gen.add(ops.host_load(s))
        variables = [popxl.variable(rng.uniform(-1, 1, shape).astype(np.float32), F32, f"v{i}")
                     for i, shape in enumerate([(16, 24), (24, 16), (24,)])]
        for v in variables:
            gen.add(v)
        for _ in range(rng.integers(4, 16)):
            gen.step()
        for i in range(2):
            outs = [gen.pick() for _ in range(transfers)]
            stream = popxl.d2h_stream(outs[0].shape, F32, f"out{i}")
            for t in outs:
                ops.host_store(stream, t if t.shape == outs[0].shape else outs[0])
    return ir, feeds, variables


def spoil(feeds: dict[Any, np.ndarray], how: int) -> dict[Any, Any]:
    """Bad run inputs: a wrong shape, a wrong dtype, a missing or an unknown stream."""
    stream, arr = next(iter(feeds.items()))
    bad = dict(feeds)
    if how == 0:
        bad[stream] = arr[..., :-1]
    elif how == 1:
        bad[stream] = arr.astype(np.int16)
    elif how == 2:
        del bad[stream]
    else:
        bad["not a stream"] = arr
    return bad


def outcome(session: popxl.Session, feeds: dict[Any, Any], variables: list[Any],
            raw: bool = False) -> list[Any]:
    """Output bytes (arrays if ``raw``) of two runs and the variables, or the error type and
    message of a run."""
    keep = (lambda a: a) if raw else (lambda a: a.tobytes())
    got: list[Any] = []
    with session:
        for _ in range(2):
            try:
                got += [keep(a) for a in session.run(feeds).values()]
            except popxl.errors.XlgraphError as exc:
                got.append((type(exc).__name__, str(exc)))
    return got + [keep(session.get_tensor_data(v)) for v in variables]


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data(), st.integers(-1, 3))
def test_fuzzed_programs_agree_or_fail_alike(data: st.DataObject, bad_input: int) -> None:
    ir, feeds, variables = build_fuzzed(data)
    inputs = feeds if bad_input < 0 else spoil(feeds, bad_input)
    optimised, interpreted = (outcome(popxl.Session(ir, optimize=optimize), inputs, variables)
                              for optimize in (True, False))  # one Ir, two Sessions
    assert optimised == interpreted
    if bad_input >= 0:
        assert isinstance(optimised[0], tuple), "the bad input was accepted"


@settings(max_examples=EXAMPLES // 2, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data(), st.integers(2, 3))
def test_fuzzed_replicated_programs_agree_or_fail_alike(data: st.DataObject,
                                                         replicas: int) -> None:
    """The replicated plan (values held once where they can be, replicated forms folded into
    one product) against the interpreter, which keeps every value on the replica axis. Equal
    up to float32 rounding: a folded product runs the same sums through another BLAS call."""
    ir, feeds, variables = build_fuzzed(data, replicas)
    optimised, interpreted = (outcome(popxl.Session(ir, optimize=optimize), feeds, variables,
                                      raw=True) for optimize in (True, False))
    assert len(optimised) == len(interpreted)
    for got, want in zip(optimised, interpreted):
        if isinstance(want, tuple) or isinstance(got, tuple):
            assert got == want
        else:
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5)
