"""PopXL's behaviour at the edges, round three: the Ir and graph introspection PopXL's own tests
read, ``subsample``'s int stride, replica-sharded variables' shapes and gathers, and in-place
ambiguity. Each test names the PopXL behaviour it matches."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops
from xlgraph.errors import SchedulingError


def test_graph_repr_ids_names_and_by_ref_inputs() -> None:
    """PopXL: ``repr(graph)`` is ``Graph[id=... name=...]``; Irs have distinct ids and unequal
    main graphs; ``graph._by_ref_inputs`` is the set of inputs annotated ``TensorByRef``."""
    ir1, ir2 = popxl.Ir(), popxl.Ir()
    assert ir1.id != ir2.id and ir1 != ir2 and ir1.main_graph != ir2.main_graph

    def foo(x: popxl.TensorByRef, y: popxl.Tensor, c: int):
        return (x * c) + y

    with ir1.main_graph:
        v1, v2 = popxl.variable(1, name="v1"), popxl.variable(2, name="v2")
        g = ir1.create_graph(foo, v1, v2, 5)
    assert (len(g.inputs), len(g.outputs), len(g._by_ref_inputs)) == (2, 1, 1)
    assert g.inputs[0] == g._by_ref_inputs.pop()
    assert len(g._by_ref_inputs) == 1  # a fresh set each time: popping changes nothing
    assert g.name == foo.__qualname__.replace(".<locals>", "") + "_subgraph(0)"
    assert repr(g) == f"Graph[id={g.id} name={g.name}]"
    assert repr(ir1.main_graph).startswith("Graph[id=")


@pytest.mark.parametrize("stride, shape", [(2, (3, 6)), ([3], (2, 6)), ((1, 4), (5, 2))])
def test_subsample_pads_its_strides_with_ones(stride, shape) -> None:
    """PopXL's ``ops.subsample(t, strides)``: an int is ``[int]``, and a list shorter than the
    rank is padded with 1s at the end."""
    x = np.arange(30, dtype=np.float32).reshape(5, 6)
    ir = popxl.Ir()
    with ir.main_graph:
        y = ops.subsample(popxl.variable(x), stride)
        assert y.shape == shape
        out = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(out, y)
    with popxl.Session(ir) as session:
        got = session.run()[out]
    steps = [stride] if isinstance(stride, int) else list(stride)
    steps += [1] * (2 - len(steps))
    np.testing.assert_array_equal(got, x[::steps[0], ::steps[1]])


def test_replica_sharded_variables_shapes_location_and_gather() -> None:
    """PopXL: a replica-sharded variable keeps its full ``shape`` (and ``shape_on_host``),
    holds a flat shard of ``ceil(nelms / shards)`` per replica (``shape_on_replica``), is stored
    off chip with sharding on; ``replicated_all_gather`` of its loaded shard gives the full
    tensor back in the variable's shape (the shard's meta shape)."""
    ir = popxl.Ir(replication=2)
    data = np.arange(15, dtype=np.float32).reshape(5, 3)
    with ir.main_graph, popxl.in_sequence():
        buffer = popxl.replica_sharded_buffer((5, 3), popxl.float32)
        v = popxl.remote_replica_sharded_variable(data, buffer, 0, name="v")
        shard = ops.remote_load(buffer, 0)
        full = ops.collectives.replicated_all_gather(shard)
        ops.remote_store(buffer, 0, shard + 1.0)
        out = popxl.d2h_stream(full.shape, full.dtype, "full")
        ops.host_store(out, full)
    assert (v.shape, v.shape_on_host, v.shape_on_replica) == ((5, 3), (5, 3), (8,))
    assert buffer.tensor_shape == (8,) and shard.meta_shape == (5, 3) and full.shape == (5, 3)
    location = v.location_info
    assert location.storage == popxl.TensorStorage.OffChip
    assert location.replicated_tensor_sharding == popxl.ReplicatedTensorSharding.On
    with popxl.Session(ir) as session:
        got = session.run()[out]
    np.testing.assert_array_equal(got, [data, data])  # every replica gathers the whole tensor
    np.testing.assert_array_equal(session.get_tensor_data(v), data + 1)


def test_variable_location_info_answers_popart_queries() -> None:
    """PopXL's ``Tensor.location_info`` is PopART's ``TensorLocationInfo``: ``isRemote()``,
    ``isSharded()`` and ``getRemoteBufferInfo()`` (buffer id, entry) for remote variables."""
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        plain = popxl.variable(np.ones(2, np.float32))
        buffer = popxl.remote_buffer((2,), popxl.float32, 3)
        remote = popxl.remote_variable(np.ones(2, np.float32), buffer, 2)
        sharded, _ = popxl.replica_sharded_variable(np.ones(4, np.float32))
    assert not plain.location_info.isRemote() and not plain.location_info.isSharded()
    assert plain.location_info.storage == popxl.TensorStorage.OnChip
    assert remote.location_info.isRemote() and not remote.location_info.isSharded()
    assert remote.location_info.getRemoteBufferInfo() == (buffer.remote_buffer_id, 2)
    assert sharded.location_info.isRemote() and sharded.location_info.isSharded()
    assert sharded.location_info.getRemoteBufferInfo()[1] == 0


# -- in-place ambiguity ------------------------------------------------------------------------
def _one(value: float = 1.0):
    return popxl.constant(np.float32(value))


# PopXL's patterns: (name, body given variable x returning the stored tensor, refused?)
PATTERNS: list[tuple[str, Callable, bool]] = [
    ("read_after_modify", lambda x: (ops.add_(x, _one()), x * 2.0)[1], True),
    ("store_after_var_update",
     lambda x: (ops.var_updates.accumulate_(x, _one()), ops.identity(x))[1], True),
    ("read_through_a_view_made_before",
     lambda x: (v := x.reshape_((2, 1)), ops.add_(x, _one()), v * 2.0)[2].reshape((2,)), True),
    ("two_unordered_modifications",
     lambda x: (ops.add_(x, _one()), ops.var_updates.accumulate_(x, _one()))[1], True),
    ("read_the_in_place_output", lambda x: ops.add_(x, _one()) * 2.0, False),
    ("read_before_modify", lambda x: (x * 2.0, ops.add_(x, _one()))[0], False),
]


@pytest.mark.parametrize("name, body, refused", PATTERNS, ids=[p[0] for p in PATTERNS])
@pytest.mark.parametrize("sequenced", [False, True])
def test_inplacing_ambiguity_is_refused_as_popxl(name, body, refused, sequenced) -> None:
    """PopXL (ambiguity checking on) refuses "Inplacing ambiguity detected." when an in-place
    op's input is read after it, or two in-place ops modify one tensor, with nothing ordering
    them; ``in_sequence`` orders them, and reading the in-place op's output is ordered by data."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence() if sequenced else contextlib.nullcontext():
        x = popxl.variable(np.ones(2, np.float32), name="x")
        y = body(x)
        out = popxl.d2h_stream(y.shape, y.dtype, "out")
        ops.host_store(out, y)
    if refused and not sequenced:
        with pytest.raises(SchedulingError) as info:
            popxl.Session(ir)
        assert str(info.value).startswith("Inplacing ambiguity detected.")
        assert "in_sequence" in str(info.value)
        return
    with popxl.Session(ir) as session:
        assert np.isfinite(session.run()[out]).all()
