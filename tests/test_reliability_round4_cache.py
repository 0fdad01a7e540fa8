"""GraphCache keys a module by every setting, private ones too (issue 43, R2).

Before the fix the key was the module's class and public attributes, so two modules that
differ only in a private attribute (``self._k``) shared the first one's graph, and the output
was wrong without an error; the same module got a new graph once ``Module`` had added its own
attributes. A class that defines ``__hash__`` is keyed by it, as popxl-addons keys modules.
"""

from __future__ import annotations

import copy

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import xlgraph as popxl
from tests.test_reliability_round3_cache import _recorder, _seen, _values
from xlgraph import addons, ops


class Scale(addons.Module):
    """Its setting is private, the usual Python spelling."""

    def __init__(self, k: float) -> None:
        super().__init__()
        self._k = k

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        return x * float(self._k)


def _run(ir: popxl.Ir, x: popxl.HostToDeviceStream, outs: list[popxl.Tensor]) -> list[list]:
    with ir.main_graph:
        streams = [popxl.d2h_stream(t.shape, t.dtype, f"out{i}") for i, t in enumerate(outs)]
        for s, t in zip(streams, outs):
            ops.host_store(s, t)
    with popxl.Session(ir) as session:
        result = session.run({x: np.ones(2, np.float32)})
    return [result[s].tolist() for s in streams]


def test_modules_that_differ_in_a_private_attribute_get_their_own_graphs():
    """R2: a parent with ``cache=True`` outlines its sub-modules through one GraphCache; the
    doubling and the tripling layer each compute their own output."""
    class Net(addons.Module):
        def __init__(self) -> None:
            super().__init__(cache=True)
            self.double = Scale(2.0)
            self.triple = Scale(3.0)

        def build(self, x):
            return self.double(x), self.triple(x)

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream((2,), popxl.float32, "x")
        xs = ops.host_load(x)
        facts, graph = Net().create_graph(xs)
        outs = graph.bind(facts.init()).call(xs)
    assert _run(ir, x, list(outs)) == [[2.0, 2.0], [3.0, 3.0]]


def test_a_module_keeps_its_graph_until_a_setting_changes():
    """The same module (even one whose class skips ``Module.__init__``) and an alike one
    share a graph; changing a private setting between two builds makes a new graph."""
    class Bare(addons.Module):
        def __init__(self, k):  # no super().__init__(): Module sets itself up when built
            self._k = k

        def build(self, x):
            return x * float(self._k)

    cache = addons.GraphCache()
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream((2,), popxl.float32, "x")
        xs = ops.host_load(x)
        bare = Bare(2.0)
        first = cache.create_graph(bare, xs.spec)
        assert cache.create_graph(bare, xs.spec) is first
        assert cache.create_graph(Bare(2.0), xs.spec) is first  # alike layers share
        bare._k = 5.0
        changed = cache.create_graph(bare, xs.spec)
        outs = [graph.bind({}).call(xs)[0] for _, graph in (first, changed)]
    assert changed is not first
    assert _run(ir, x, outs) == [[2.0, 2.0], [5.0, 5.0]]


def test_a_class_that_defines_hash_is_keyed_by_it():
    """As popxl-addons: instances whose ``__hash__`` is equal share a graph, whatever their
    other attributes; another hash is another graph."""
    class Hashed(Scale):
        def __init__(self, k, label):
            super().__init__(k)
            self.label = label  # not part of the graph: left out of the hash

        def __hash__(self):
            return hash(("Hashed", self._k))

    cache = addons.GraphCache()
    with popxl.Ir().main_graph:
        spec = popxl.TensorSpec((2,), popxl.float32)
        a = cache.create_graph(Hashed(2.0, "a"), spec)
        assert cache.create_graph(Hashed(2.0, "b"), spec) is a
        assert cache.create_graph(Hashed(3.0, "a"), spec) is not a
    assert len(cache) == 2


def test_equal_hashes_share_a_graph_only_when_the_class_says_the_modules_are_equal():
    """A class with ``__eq__`` as well decides with ``==``: ``-1`` and ``-2`` hash alike but
    are not equal, so each gets its own graph (and the right output)."""
    class Settled(Scale):
        def __eq__(self, other):
            return type(other) is type(self) and other._k == self._k

        def __hash__(self):
            return hash(self._k)

    cache = addons.GraphCache()
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream((2,), popxl.float32, "x")
        xs = ops.host_load(x)
        graphs = [cache.create_graph(Settled(k), xs.spec) for k in (-1, -2, -1)]
        outs = [graph.bind({}).call(xs)[0] for _, graph in graphs]
    assert graphs[0] is graphs[2] and graphs[0] is not graphs[1]
    assert _run(ir, x, outs) == [[-1.0, -1.0], [-2.0, -2.0], [-1.0, -1.0]]


class Recorder(addons.Module):
    """Records its setting, public or private, in its graph (``_recorder``)."""

    def __init__(self, value: object, private: bool) -> None:
        super().__init__()
        setattr(self, "_value" if private else "value", value)

    def build(self, x):
        setting = vars(self).get("_value", vars(self).get("value"))
        return _recorder(x, setting)


@settings(max_examples=40, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_values, min_size=1, max_size=5))
def test_cached_module_graphs_match_uncached_ones_for_any_settings(values):
    """Modules whose settings are arbitrary values, held in public or private attributes (a
    fresh deep copy each time): the cached graph records what an uncached build records."""
    cache = addons.GraphCache()
    with popxl.Ir().main_graph:
        spec = popxl.TensorSpec((2,), popxl.float32)
        for v in values:
            for private in (True, False):
                want = _seen(Recorder(copy.deepcopy(v), private).create_graph(spec)[1].graph)
                _, got = cache.create_graph(Recorder(copy.deepcopy(v), private), spec)
                assert _seen(got.graph) == want
