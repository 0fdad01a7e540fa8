"""GraphCache and ``addons.function`` keys are exact (issue 36, D1 and D2, and the widened guard).

Before the fix the key was ``hash()`` of the arguments, with unhashable ones (numpy arrays)
hashed by ``id()``: ``k=-2`` got the graph made for ``k=-1`` (``hash(-1) == hash(-2)``), and an
array freed and replaced by one at the same address got the old array's graph (expected 3, got 2).
"""

from __future__ import annotations

import copy
import sys

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import xlgraph as popxl
from xlgraph import addons, ops


def _run_outputs(ir: popxl.Ir, x: popxl.HostToDeviceStream, outs: list[popxl.Tensor]
                 ) -> list[np.ndarray]:
    with ir.main_graph:
        streams = []
        for i, t in enumerate(outs):
            s = popxl.d2h_stream(t.shape, t.dtype, f"out{i}")
            ops.host_store(s, t)
            streams.append(s)
    with popxl.Session(ir) as session:
        result = session.run({x: np.ones(2, np.float32)})
    return [result[s] for s in streams]


def test_arguments_whose_hashes_collide_get_their_own_graphs() -> None:
    """D1: -1 and -2 (and k and k + 2**61 - 1) hash alike; each now makes its own graph."""
    assert hash(-1) == hash(-2) and hash(5) == hash(5 + sys.hash_info.modulus)
    cache = addons.GraphCache()

    def scale(x, k):
        return x * float(k % 7 if k > 100 else k)

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream((2,), popxl.float32, "x")
        xs = ops.host_load(x)
        ks = [-1, -2, 5, 5 + sys.hash_info.modulus]
        graphs = [cache.create_graph(scale, xs, k) for k in ks]
        outs = [ops.call(g, xs)[0] for g in graphs]
    assert len({id(g) for g in graphs}) == 4 and len(cache) == 4
    got = [float(o[0]) for o in _run_outputs(ir, x, outs)]
    assert got == [-1.0, -2.0, 5.0, float((5 + sys.hash_info.modulus) % 7)]


def test_module_settings_whose_hashes_collide_get_their_own_graphs() -> None:
    """D1 through a module: settings go into the key by value, not by their hash."""
    class Scale(addons.Module):
        def __init__(self, k):
            super().__init__()
            self.k = k

        def build(self, x):
            return x * float(self.k)

    cache = addons.GraphCache()
    ir = popxl.Ir()
    with ir.main_graph:
        spec = popxl.TensorSpec((2,), popxl.float32)
        _, a = cache.create_graph(Scale(-1), spec)
        _, b = cache.create_graph(Scale(-2), spec)
        _, c = cache.create_graph(Scale(-1), spec)
    assert a is not b and a is c


def test_a_freed_array_never_brings_back_an_old_graph() -> None:
    """D2: arrays freed between calls reuse addresses; each value gets its own constant."""
    @addons.function
    def add_const(x, c):
        return x + popxl.constant(c)

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream((2,), popxl.float32, "x")
        xs = ops.host_load(x)
        outs, ids = [], []
        for v in (1.0, 2.0, 3.0, 2.0):
            c = np.full(2, v, np.float32)
            ids.append(id(c))
            outs.append(add_const(xs, c))
            del c
    got = [o.tolist() for o in _run_outputs(ir, x, outs)]
    assert got == [[2.0, 2.0], [3.0, 3.0], [4.0, 4.0], [3.0, 3.0]]
    # equal arrays (a fresh object of the same value) share one graph
    assert outs[1].producer.called_graphs[0] is outs[3].producer.called_graphs[0]


def test_placement_is_part_of_the_key() -> None:
    """A graph built under ``popxl.ipu(1)`` carries that placement: not reused on IPU 0."""
    cache = addons.GraphCache()

    def fn(x):
        return x + 1

    ir = popxl.Ir()
    with ir.main_graph:
        spec = popxl.TensorSpec((2,), popxl.float32)
        a = cache.create_graph(fn, spec)
        with popxl.ipu(1):
            b = cache.create_graph(fn, spec)
        assert cache.create_graph(fn, spec) is a and a is not b


# -- the widened guard: arbitrary values against uncached graphs ----------------------------------
def _describe(v: object) -> str:
    """A text that differs for values that must make different graphs (type and exact value)."""
    if isinstance(v, np.ndarray | np.generic):
        return f"{type(v).__name__}({v.dtype.str},{np.shape(v)},{v.tobytes().hex()})"
    if isinstance(v, list | tuple):
        return f"{type(v).__name__}[{','.join(map(_describe, v))}]"
    if isinstance(v, dict):
        return "dict{" + ",".join(f"{_describe(k)}:{_describe(x)}" for k, x in v.items()) + "}"
    return f"{type(v).__name__}:{v!r}"


def _recorder(x, v):
    """A graph that carries the description of ``v`` as a constant."""
    text = np.frombuffer(_describe(v).encode(), np.uint8)
    popxl.constant(text, popxl.uint8, name="seen")
    return x + 0.0


def _seen(graph: popxl.Graph) -> str:
    [c] = [t for t in graph.constants if t.name.endswith("seen")]
    return bytes(np.asarray(c.data, np.uint8)).decode()


_M = sys.hash_info.modulus
_scalars = st.one_of(
    st.integers(), st.floats(allow_nan=True), st.text(max_size=4), st.booleans(), st.none(),
    st.sampled_from([-1, -2, 1, 1.0, True, 0.0, -0.0, 7, 7 + _M, -7 - _M, np.int64(1),
                     np.float32(1.0), np.float64(-0.0), (1, 2), [1, 2]]),
)
_arrays = hnp.arrays(st.sampled_from([np.float32, np.int32, np.float64]),
                     st.sampled_from([(2,), (1, 2), (2, 1)]))
_values = st.recursive(
    _scalars | _arrays,
    lambda inner: (st.lists(inner, max_size=3) | st.tuples(inner, inner)
                   | st.dictionaries(st.text(max_size=2), inner, max_size=2)),
    max_leaves=5)


@settings(max_examples=80, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@example([-1, -2, -1])
@example([np.full(2, 1.0, np.float32), np.full(2, 2.0, np.float32), np.full(2, 3.0, np.float32)])
@example([0.0, -0.0, 1, 1.0, True, np.int64(1)])
@given(st.lists(_values, min_size=1, max_size=6))
def test_cached_graphs_match_uncached_ones_for_any_arguments(values: list[object]) -> None:
    """Each call gets the graph an uncached build makes for its value, through ``GraphCache``
    and ``addons.function``; every argument is a fresh deep copy freed right after the call,
    so freed arrays' addresses come back."""
    cache = addons.GraphCache()
    outlined = addons.function(_recorder)
    ir = popxl.Ir()
    with ir.main_graph:
        spec = popxl.TensorSpec((2,), popxl.float32)
        xs = popxl.variable(np.zeros(2, np.float32), name="x")
        for v in values:
            fresh = copy.deepcopy(v)
            want = _seen(ir.create_graph(_recorder, spec, fresh))  # uncached
            assert _seen(cache.create_graph(_recorder, spec, fresh)) == want
            out = outlined(xs, fresh)
            assert _seen(out.producer.called_graphs[0]) == want
            del fresh
