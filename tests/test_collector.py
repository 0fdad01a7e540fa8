"""The cyclic collector's pause around graph transforms (``xlgraph.core.collector``): it is
restored as it was however the transform ends, and a large transform's objects are settled in
the oldest generation instead of being walked by the young collections after it."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import numpy as np
import pytest

import xlgraph
from xlgraph import ops
from xlgraph.core import collector
from xlgraph.core.collector import collector_paused
from xlgraph.errors import SchedulingError


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


@collector_paused
def _make(n: int, fail: bool = False) -> list[list[int]]:
    assert not gc.isenabled()
    made = [[i] for i in range(n)]
    if fail:
        raise ValueError("transform failed")
    return made


def _generation_of(obj: object) -> int:
    return next(g for g in range(3) if any(o is obj for o in gc.get_objects(generation=g)))


def test_a_pause_restores_the_collector_when_the_transform_raises(collector_on):
    with pytest.raises(ValueError, match="transform failed"):
        _make(10, fail=True)
    assert gc.isenabled()
    gc.disable()
    with pytest.raises(ValueError, match="transform failed"):
        _make(10, fail=True)
    assert not gc.isenabled()  # it was off: the pause leaves it off


def test_only_the_outermost_pause_turns_the_collector_back_on(collector_on):
    @collector_paused
    def outer() -> bool:
        _make(10)
        return gc.isenabled()  # the inner pause found it off: still off here

    assert outer() is False
    assert gc.isenabled()


def test_a_large_transform_settles_its_objects_in_the_oldest_generation(collector_on):
    made = _make(collector.SETTLE_MIN_OBJECTS + 1000)
    assert _generation_of(made[-1]) == 2
    assert gc.get_freeze_count() == 0


def test_nothing_settles_while_the_process_keeps_objects_frozen(collector_on):
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        made = _make(collector.SETTLE_MIN_OBJECTS + 1000)
        # The process's frozen objects stay frozen: a settle would unfreeze them all (count 0)
        # or freeze the new ones too (count up). Frozen objects that other threads drop
        # meanwhile leave the count, so it may only fall by those.
        assert 0 < gc.get_freeze_count() <= frozen
        assert _generation_of(made[-1]) < 2
    finally:
        gc.unfreeze()


def _unordered_update_and_read() -> xlgraph.Ir:
    ir = xlgraph.Ir()
    with ir.main_graph:
        w = xlgraph.variable(np.ones(2, np.float32), name="w")
        ops.add_(w, xlgraph.constant(np.ones(2, np.float32)))
        s_y = xlgraph.d2h_stream((2,), xlgraph.float32, "y")
        ops.host_store(s_y, w + 1.0)  # reads w, which add_ modifies, with nothing ordering them
    return ir


@pytest.mark.parametrize("enabled", [True, False])
def test_a_session_restores_the_collector_when_lowering_raises(collector_on, enabled):
    (gc.enable if enabled else gc.disable)()
    with pytest.raises(SchedulingError, match="Inplacing ambiguity"):
        xlgraph.Session(_unordered_update_and_read())
    assert gc.isenabled() is enabled


def test_a_session_restores_the_collector_after_lowering(collector_on):
    ir = xlgraph.Ir()
    with ir.main_graph:
        w = xlgraph.variable(np.ones(3, np.float32), name="w")
        s_y = xlgraph.d2h_stream((3,), xlgraph.float32, "y")
        ops.host_store(s_y, w * 2)
    with xlgraph.Session(ir, backend="numpy") as session:
        out = session.run({})
    assert gc.isenabled()
    np.testing.assert_array_equal(out[s_y], np.full(3, 2, np.float32))
