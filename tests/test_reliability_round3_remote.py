"""Remote-buffer indices are range-checked everywhere (issue 36, D4).

Before the fix, a tensor offset of -1 wrapped around like Python indexing: ``remote_store``
with index -1 overwrote entry 2 (another remote variable) without a word, on every backend
and with ``optimize=False``. Indices past the end already raised.
"""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops
from xlgraph.errors import ArgumentError, ExecutionError

_RANGE = r"is outside RemoteBuffer\[id=\d+ float32\[2\] x 3\]; valid entries are 0 to 2"


def _store_at_streamed_index(replicas: int = 1):
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph, popxl.in_sequence():
        buf = popxl.remote_buffer((2,), popxl.float32, entries=3)
        kept = popxl.remote_variable(np.full(2, 9.0, np.float32), buf, 2, name="layer2_weights")
        idx = popxl.h2d_stream((), popxl.int32, "idx")
        value = popxl.constant(np.array([5.0, 6.0], np.float32))
        at = ops.host_load(idx)
        ops.remote_store(buf, at, value)
        out = popxl.d2h_stream((2,), popxl.float32, "loaded")
        ops.host_store(out, ops.remote_load(buf, at))
    return ir, idx, kept


@pytest.mark.parametrize("backend,optimize", [("numpy", True), ("numba", True),
                                              ("numpy", False)])
@pytest.mark.parametrize("index", [-1, -3, 3, 1000])
def test_a_streamed_index_outside_the_buffer_is_refused(backend: str, optimize: bool,
                                                        index: int) -> None:
    ir, idx, kept = _store_at_streamed_index()
    with popxl.Session(ir, backend=backend, optimize=optimize) as session:
        with pytest.raises(ExecutionError, match=rf"remote_store.* offset tensor's value "
                                                 rf"{index} {_RANGE}"):
            session.run({idx: np.array(index, np.int32)})
        assert session.get_tensor_data(kept).tolist() == [9.0, 9.0]  # entry 2 untouched
        loaded = session.run({idx: np.array(1, np.int32)})
    assert [a.tolist() for a in loaded.values()] == [[5.0, 6.0]]


def test_a_replica_index_outside_the_buffer_is_refused() -> None:
    ir, idx, kept = _store_at_streamed_index(replicas=2)
    with popxl.Session(ir) as session:
        with pytest.raises(ExecutionError, match=rf"offset tensor's value -1 {_RANGE}"):
            session.run({idx: np.array([0, -1], np.int32)})
        assert np.asarray(session.get_tensor_data(kept)).reshape(-1, 2)[-1].tolist() == [9, 9]


@pytest.mark.parametrize("index", [-1, 3, True, 1.0])
def test_a_constant_index_is_refused_when_the_op_is_built(index: object) -> None:
    with popxl.Ir().main_graph:
        buf = popxl.remote_buffer((2,), popxl.float32, entries=3)
        t = popxl.constant(np.zeros(2, np.float32))
        for build in (lambda: ops.remote_store(buf, index, t), lambda: ops.remote_load(buf, index),
                      lambda: ops.remote_load_(buf, index, t)):
            with pytest.raises(ArgumentError, match=rf"offset {index!r} {_RANGE}.*\[at "
                                                    rf"test_reliability_round3_remote.py:"):
                build()
        with pytest.raises(IndexError, match=rf"remote variable 'w': offset {index!r} {_RANGE}"
                                             rf" \[at test_reliability_round3_remote.py:"):
            popxl.remote_variable(np.zeros(2, np.float32), buf, index, name="w")
