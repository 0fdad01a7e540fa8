"""PopXL user-guide programs on replication, replica grouping, remote variables, replicated
tensor sharding (RTS) and phased execution, written as PopXL's documentation writes them
(``import popxl``) and run through the ``popxl`` alias.

Each program checks its results against numpy written from PopXL's documented semantics
(the PopXL behaviour each matches is named in the program's docstring line).
"""

from __future__ import annotations

import textwrap

import pytest

from xlgraph import popxl_compat

PROGRAMS: dict[str, str] = {}


def program(name: str, source: str) -> None:
    PROGRAMS[name] = textwrap.dedent(source)


program("replication", """
    # PopXL: ir.replication_factor set after Ir(); a stream's data gains a replica dimension
    # (then a host-transfer one before it), each replica adds its own input to one variable.
    import numpy as np
    import popxl
    import popxl.ops as ops

    for transfers in (1, 3):
        ir = popxl.Ir()
        ir.replication_factor = 2
        ir.num_host_transfers = transfers
        with ir.main_graph:
            x_h2d = popxl.h2d_stream([1], popxl.float32, name="input0_stream")
            b = popxl.variable(1.0, name="b")
            y_d2h = popxl.d2h_stream([1], popxl.float32, name="output_stream")

            def body(b):
                ops.host_store(y_d2h, ops.add(ops.host_load(x_h2d, "a"), b))

            ops.repeat(ir.create_graph(body, b), transfers, b)
        shape = ((transfers,) if transfers > 1 else ()) + (2, 1)
        data = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        with popxl.Session(ir, "ipu_model") as session:
            out = session.run({x_h2d: data})
        assert out[y_d2h].shape == shape
        np.testing.assert_array_equal(out[y_d2h], data + 1)
""")

program("replica_grouping_assignments", """
    # PopXL: Ir.replica_grouping's documented assignments for 8 replicas, group members
    # `stride` apart, groups numbered by their first replica, exact partitions only.
    import numpy as np
    import popxl

    def expected(n, stride, size):  # group of replica r, written from the definition
        groups = []
        for r in range(n):
            if not any(r in g for g in groups):
                groups.append([r + i * stride for i in range(size)])
        assert sorted(sum(groups, [])) == list(range(n))
        return [next(i for i, g in enumerate(groups) if r in g) for r in range(n)]

    ir = popxl.Ir(replication=8)
    assert list(ir.replica_grouping(1, 2).assignment) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert list(ir.replica_grouping(2, 4).assignment) == [0, 1, 0, 1, 0, 1, 0, 1]
    assert list(ir.replica_grouping(4, 2).assignment) == [0, 1, 2, 3, 0, 1, 2, 3]
    assert list(ir.replica_grouping().assignment) == [0] * 8
    for n, stride, size in ((8, 1, 2), (8, 2, 4), (8, 4, 2), (16, 4, 4), (16, 2, 2),
                            (32, 4, 8), (64, 4, 8)):
        rg = popxl.Ir(replication=n).replica_grouping(stride=stride, group_size=size)
        assert list(rg.assignment) == expected(n, stride, size), (n, stride, size)
        assert (rg.stride, rg.group_size, rg.num_groups) == (stride, size, n // size)
    # rg.transpose(): group i holds the i-th member of every group of rg
    for n, stride, size in ((8, 1, 2), (8, 4, 2), (16, 1, 4), (32, 4, 8)):
        rg = popxl.Ir(replication=n).replica_grouping(stride=stride, group_size=size)
        t = rg.transpose()
        for r in range(n):
            members = [m for m in range(n) if rg.assignment[m] == rg.assignment[r]]
            assert t.assignment[r] == members.index(r), (n, stride, size, r)
        assert t.num_groups == size and t.group_size == rg.num_groups
    assert ir.replica_grouping(1, 2).transpose().stride == 2
    # 8 members 4 apart span 32 replicas: 16 replicas cannot be partitioned so
    try:
        popxl.Ir(replication=16).replica_grouping(stride=4, group_size=8)
    except ValueError as e:
        assert "stride=4, group_size=8" in str(e) and "16 replicas" in str(e)
    else:
        raise AssertionError("a grouping that does not partition 16 replicas was built")
""")

program("replica_grouped_variables", """
    # PopXL: a grouped variable's data has a leading group dimension; replica r holds
    # data[assignment[r]]; 'all_replicas' retrieval returns one value per replica;
    # replicated_all_reduce(group=rg) sums over the group's members.
    import numpy as np
    import popxl
    import popxl.ops as ops

    n = 32
    ir = popxl.Ir(replication=n)
    groupings = [ir.replica_grouping(group_size=1), ir.replica_grouping(group_size=2),
                 ir.replica_grouping(stride=4, group_size=8), ir.replica_grouping()]
    rng = np.random.default_rng(0)
    datas = [rng.normal(size=(rg.num_groups, 3)).astype(np.float32) for rg in groupings]
    with ir.main_graph:
        vs = [popxl.variable(d if rg.num_groups > 1 else d[0], name=f"v{i}",
                             replica_grouping=rg, retrieval_mode="all_replicas")
              for i, (rg, d) in enumerate(zip(groupings, datas))]
        streams = []
        for v, rg in zip(vs, groupings):
            s = popxl.d2h_stream((3,), popxl.float32)
            ops.host_store(s, ops.collectives.replicated_all_reduce(v, group=rg))
            streams.append(s)
    assert vs[2].shape == (3,) and vs[2].shape_on_host == (4, 3)
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run()
        for v, rg, d, s in zip(vs, groupings, datas, streams):
            a = np.array(rg.assignment)
            np.testing.assert_array_equal(session.get_tensor_data(v), d[a])
            np.testing.assert_allclose(out[s], rg.group_size * d[a], rtol=1e-6)
""")

program("remote_variable", """
    # PopXL: remote_variable(data, buffer, offset) stores data in entry `offset`; programs
    # reach it with remote_load / remote_store; get_tensor_data / write_variable_data read
    # and write the entry.
    import numpy as np
    import popxl
    import popxl.ops as ops

    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        buffer = popxl.remote_buffer((2,), popxl.float32, entries=2)
        x0 = popxl.remote_variable(np.array([1.0, 2.0]), buffer, 0, name="x0")
        x1 = popxl.remote_variable(np.array([3.0, 4.0]), buffer, 1, name="x1")
        y = ops.remote_load(buffer, 0) + ops.remote_load(buffer, 1)
        ops.remote_store(buffer, 1, y)
    assert x0.dtype == popxl.float32 and x0.shape == (2,)
    assert x0.location_info.storage == popxl.TensorStorage.OffChip
    with popxl.Session(ir, "ipu_model") as session:
        session.run()
        np.testing.assert_array_equal(session.get_tensor_data(x1), [4.0, 6.0])
        session.write_variable_data(x0, np.array([10.0, 20.0], np.float32))
        session.run()
        np.testing.assert_array_equal(session.get_tensor_data(x1), [14.0, 26.0])
        np.testing.assert_array_equal(session.get_tensor_data(x0), [10.0, 20.0])
""")

program("remote_rts_var", """
    # PopXL: replica_sharded_buffer holds a flat, zero-padded shard of ceil(nelms / replicas)
    # per replica with the full shape as meta_shape; replicated_all_gather of a loaded shard
    # is the full tensor; replica_sharded_slice of it is this replica's shard again.
    import numpy as np
    import popxl
    import popxl.ops as ops

    for n, shape in ((2, (4, 2)), (4, (5,)), (8, (3, 3))):
        data = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) + 1
        ir = popxl.Ir(replication=n)
        with ir.main_graph:
            buffer = popxl.replica_sharded_buffer(shape, popxl.float32)
            v = popxl.remote_replica_sharded_variable(data, buffer, 0, name="v")
            shard = ops.remote_load(buffer, 0)
            full = ops.collectives.replicated_all_gather(shard)
            ops.remote_store(buffer, 0, ops.collectives.replica_sharded_slice(full * 2.0))
            d2h = popxl.d2h_stream(full.shape, full.dtype, "full")
            ops.host_store(d2h, full)
        size = -(-data.size // n)
        assert buffer.tensor_shape == (size,) and buffer.meta_shape == shape
        assert shard.shape == (size,) and shard.meta_shape == shape and full.shape == shape
        assert v.shape == shape
        with popxl.Session(ir, "ipu_model") as session:
            out = session.run()[d2h]
            np.testing.assert_array_equal(out, np.broadcast_to(data, (n,) + shape))
            np.testing.assert_array_equal(session.get_tensor_data(v), 2 * data)
            session.run()
            np.testing.assert_array_equal(session.get_tensor_data(v), 4 * data)
""")

program("rts_var", """
    # PopXL: replica_sharded_variable returns (variable, shard); the shard is loaded in the
    # WeightsFromHost program and stored back in WeightsToHost, so in-place updates of the
    # shard are the variable's new data (and persist from run to run).
    import numpy as np
    import popxl
    import popxl.ops as ops

    for n in (2, 4):
        data = np.arange(10, dtype=np.float32).reshape(5, 2)
        ir = popxl.Ir(replication=n)
        with ir.main_graph, popxl.in_sequence():
            v, shard = popxl.replica_sharded_variable(data, popxl.float32, "v")
            full = ops.collectives.replicated_all_gather(shard)
            d2h = popxl.d2h_stream(full.shape, full.dtype, "full")
            ops.host_store(d2h, full)
            ops.var_updates.accumulate_(shard, popxl.constant(1.0))
        assert v.shape == (5, 2) and shard.meta_shape == (5, 2)
        with popxl.Session(ir, "ipu_model") as session:
            first = session.run()[d2h]
            second = session.run()[d2h]
            np.testing.assert_array_equal(first[0], data)
            np.testing.assert_array_equal(second[-1], data + 1)
            np.testing.assert_array_equal(session.get_tensor_data(v), data + 2)
            session.write_variable_data(v, np.zeros_like(data))
            third = session.run()[d2h]
            np.testing.assert_array_equal(third[0], 0 * data)
        np.testing.assert_array_equal(session.get_tensor_data(v), np.ones_like(data))
""")

program("phased_execution", """
    # PopXL phased execution: each layer's weights live in one entry of a remote buffer,
    # a phase loads them, runs the layer and stores the updated weights back.
    import numpy as np
    import popxl
    import popxl.ops as ops

    layers, lr = 3, 0.1
    rng = np.random.default_rng(1)
    w0 = rng.normal(size=(layers, 4, 4)).astype(np.float32)
    x0 = rng.normal(size=(2, 4)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        buffer = popxl.remote_buffer((4, 4), popxl.float32, entries=layers)
        ws = [popxl.remote_variable(w0[i], buffer, i, name=f"w{i}") for i in range(layers)]
        x_h2d = popxl.h2d_stream((2, 4), popxl.float32, "x")
        y_d2h = popxl.d2h_stream((2, 4), popxl.float32, "y")
        x = ops.host_load(x_h2d)
        for i in range(layers):
            w = ops.remote_load(buffer, i)
            y = ops.relu(x @ w)
            # a toy update: w -= lr * x^T y
            ops.remote_store(buffer, i, w - lr * (ops.transpose(x) @ y))
            x = y
        ops.host_store(y_d2h, x)
    expect_w, expect_x = w0.copy(), x0
    for i in range(layers):
        y = np.maximum(expect_x @ expect_w[i], 0)
        expect_w[i] -= lr * expect_x.T @ y
        expect_x = y
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run({x_h2d: x0})[y_d2h]
        got = session.get_tensors_data(ws)
    np.testing.assert_allclose(out, expect_x, rtol=1e-5, atol=1e-6)
    for i, w in enumerate(ws):
        np.testing.assert_allclose(got[w], expect_w[i], rtol=1e-5, atol=1e-6)
""")


program("merge_exchange", """
    # PopXL: host and remote transfers created in one transforms.merge_exchange() scope become
    # one exchange; each keeps its meaning (a host_load / remote_load / remote_store /
    # host_store per repeat iteration, a tensor offset reaching a different entry each time).
    import numpy as np
    import popxl
    import popxl.ops as ops

    steps = 3
    ir = popxl.Ir(replication=2)
    ir.num_host_transfers = steps
    with ir.main_graph:
        buffer = popxl.remote_buffer((2,), popxl.float32, entries=steps)
        ws = [popxl.remote_variable(np.full(2, i, np.float32), buffer, i) for i in range(steps)]
        x_h2d = popxl.h2d_stream((2,), popxl.float32, "x")
        y_d2h = popxl.d2h_stream((2,), popxl.float32, "y")
        index = popxl.variable(np.int32(0), name="index")

        def step(index: popxl.TensorByRef):
            with popxl.transforms.merge_exchange():
                x = ops.host_load(x_h2d)
                w = ops.remote_load(buffer, index)
            z = x + w
            with popxl.in_sequence():
                with popxl.transforms.merge_exchange():
                    ops.remote_store(buffer, index, z)
                    ops.host_store(y_d2h, z)
                ops.var_updates.accumulate_(index, popxl.constant(np.int32(1)))

        ops.repeat(ir.create_graph(step, index), steps, index)
    x = np.arange(steps * 2 * 2, dtype=np.float32).reshape(steps, 2, 2)
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run({x_h2d: x})[y_d2h]
        np.testing.assert_array_equal(out, x + np.arange(steps, dtype=np.float32)[:, None, None])
        for i, w in enumerate(ws):  # replica 0 represents the single group
            np.testing.assert_array_equal(session.get_tensor_data(w), x[i, 0] + i)
""")


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_popxl_doc_program(name: str) -> None:
    popxl_compat.install()
    try:
        exec(compile(PROGRAMS[name], f"{name}.py", "exec"), {"__name__": "__main__"})  # noqa: S102
    finally:
        popxl_compat.uninstall()
