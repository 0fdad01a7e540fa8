"""PopXL user-guide example programs, reconstructed from their described behaviour
(popxl-reference.md) and run unchanged through the ``popxl`` alias.

Each program is written as a PopXL user would (``import popxl``), checks its own results
against numpy, and runs on the simulator. ``docs/popxl-compat.md`` lists them.

Over 400 lines: the programs are kept whole, as the guide prints them, and all run by one
parametrised test.
"""

from __future__ import annotations

import textwrap

import pytest

from xlgraph import popxl_compat

PROGRAMS: dict[str, str] = {}


def program(name: str, source: str) -> None:
    PROGRAMS[name] = textwrap.dedent(source)


program("basic_graph", """
    import numpy as np
    import popxl
    import popxl.ops as ops

    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.array([1, 2, 3], np.int32), name="a")
        b = popxl.constant(np.array([10, 20, 30], np.int32), name="b")
        o = ops.add(a, b)
        o_d2h = popxl.d2h_stream(o.shape, o.dtype, name="output_stream")
        ops.host_store(o_d2h, o)
    session = popxl.Session(ir, "ipu_model")
    with session:
        outputs = session.run()
    assert outputs[o_d2h].tolist() == [11, 22, 33]
""")

program("create_graph", """
    import numpy as np
    import popxl
    import popxl.ops as ops

    def increment_fn(x: popxl.Tensor, value: float):
        return x + value

    ir = popxl.Ir()
    with ir.main_graph:
        x_h2d = popxl.h2d_stream((2, 2), popxl.float32, name="x")
        x = ops.host_load(x_h2d)
        plus_one = ir.create_graph(increment_fn, x, value=1.0)
        plus_two = ir.create_graph(increment_fn, popxl.TensorSpec((2, 2), popxl.float32), 2.0)
        (y,) = ops.call(plus_one, x)
        (z,) = ops.call(plus_two, y)
        z_d2h = popxl.d2h_stream(z.shape, z.dtype, name="z")
        ops.host_store(z_d2h, z)
    assert plus_one.name != plus_two.name and len(plus_one.inputs) == 1
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run({x_h2d: np.ones((2, 2), np.float32)})
    np.testing.assert_array_equal(out[z_d2h], np.full((2, 2), 4.0))
""")

program("call_with_info", """
    import numpy as np
    import popxl
    import popxl.ops as ops

    def increment(x):
        ops.var_updates.accumulate_(x, popxl.constant(np.ones(1, np.float32)))

    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        by_value = popxl.variable(np.ones(1, np.float32), name="by_value")
        modified = popxl.variable(np.ones(1, np.float32), name="modified")
        g = ir.create_graph(increment, by_value)
        ops.call(g, by_value)
        info = ops.call_with_info(g, modified)
        info.set_parent_input_modified(modified)
        assert info.parent_input(0) is modified and info.called_graph is g
    session = popxl.Session(ir, "ipu_model")
    with session:
        session.run()
    assert session.get_tensor_data(by_value)[0] == 1.0   # passed by value
    assert session.get_tensor_data(modified)[0] == 2.0   # marked modified
""")

program("repeat_graph", """
    import numpy as np
    import popxl
    import popxl.ops as ops

    class AddWeight(popxl.Module):
        def __init__(self):
            self.w = None

        def build(self, x):
            self.w = popxl.graph_input(x.shape, x.dtype, "w")
            return x + self.w

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros(3, np.float32), name="x")
        w = popxl.variable(np.arange(3, dtype=np.float32), name="w")
        module = AddWeight()
        body = ir.create_graph(module, x)
        (y,) = ops.repeat(body, 4, x, inputs_dict={module.w: w})
        d2h = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(d2h, y)
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run()
    np.testing.assert_array_equal(out[d2h], 4 * np.arange(3))
""")

program("conditional", """
    import numpy as np
    import popxl
    import popxl.ops as ops

    ir = popxl.Ir()
    with ir.main_graph:
        cond_h2d = popxl.h2d_stream((), popxl.bool, "cond")
        x = popxl.variable(np.array([1.0, -2.0], np.float32), name="x")
        then_g = ir.create_graph(lambda t: t * 2.0, x)
        else_g = ir.create_graph(lambda t: -t, x)
        (y,) = ops.conditional(ops.host_load(cond_h2d), then_g, else_g, [x], [x])
        d2h = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(d2h, y)
    with popxl.Session(ir, "ipu_model") as session:
        taken = session.run({cond_h2d: np.array(True)})[d2h]
        other = session.run({cond_h2d: np.array(False)})[d2h]
    np.testing.assert_array_equal(taken, [2.0, -4.0])
    np.testing.assert_array_equal(other, [-1.0, 2.0])
""")

program("autodiff", """
    import numpy as np
    import popxl
    import popxl.ops as ops
    import popxl.transforms as transforms

    def linear(x, w, b):
        return ops.tanh(x @ w + b)

    rng = np.random.default_rng(0)
    xs, ws, bs = rng.normal(size=(4, 3)), rng.normal(size=(3, 2)), rng.normal(size=(2,))
    ir = popxl.Ir()
    with ir.main_graph:
        x, w, b = (popxl.variable(v, name=n) for v, n in ((xs, "x"), (ws, "w"), (bs, "b")))
        fwd = ir.create_graph(linear, x, w, b)
        info = transforms.autodiff(fwd, grads_required=[fwd.inputs[1], fwd.inputs[2]])
        kinds = [c.connection_type for c in info.expected_inputs]
        assert kinds[0] == popxl.transforms.ExpectedConnectionType.FwdGrad
        site = ops.call_with_info(fwd, x, w, b)
        seed = popxl.constant(np.ones((4, 2), np.float32))
        dw, db = ops.call(info.graph, seed, inputs_dict=info.inputs_dict(site))
        streams = [popxl.d2h_stream(t.shape, t.dtype, n) for t, n in ((dw, "dw"), (db, "db"))]
        for s, t in zip(streams, (dw, db)):
            ops.host_store(s, t)
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run()
    dz = 1 - np.tanh(xs @ ws + bs) ** 2
    np.testing.assert_allclose(out[streams[0]], xs.T @ dz, rtol=1e-5)
    np.testing.assert_allclose(out[streams[1]], dz.sum(0), rtol=1e-5)
""")

program("host_load_in_repeat", """
    import numpy as np
    import popxl
    import popxl.ops as ops

    ir = popxl.Ir()
    ir.num_host_transfers = 4
    with ir.main_graph:
        x_h2d = popxl.h2d_stream((2,), popxl.float32, "x")
        y_d2h = popxl.d2h_stream((2,), popxl.float32, "y")
        total = popxl.variable(np.zeros(2, np.float32), name="total")

        def step(acc: popxl.TensorByRef):
            acc = ops.var_updates.accumulate_(acc, ops.host_load(x_h2d))
            ops.host_store(y_d2h, acc)  # the updated tensor: PopXL refuses a read of the old

        ops.repeat(ir.create_graph(step, total), 4, total)
    data = np.arange(8, dtype=np.float32).reshape(4, 2)
    session = popxl.Session(ir, "ipu_model")
    with session:
        out = session.run({x_h2d: data})
    np.testing.assert_array_equal(out[y_d2h], np.cumsum(data, 0))
    np.testing.assert_array_equal(session.get_tensor_data(total), data.sum(0))
""")

program("random_seed", """
    import numpy as np
    import popxl
    import popxl.ops as ops
    from popxl.random_seed import create_seeds

    ir = popxl.Ir()
    with ir.main_graph:
        seed = popxl.variable(create_seeds(1984), popxl.uint32, name="seed")
        s1, s2 = ops.split_random_seed(seed)
        noise = ops.random_normal(s1, (1000,), mean=1.0, std=0.5)
        kept = ops.dropout(popxl.constant(np.ones(1000, np.float32)), s2, p=0.25)
        streams = [popxl.d2h_stream((1000,), popxl.float32, n) for n in ("noise", "kept")]
        for s, t in zip(streams, (noise, kept)):
            ops.host_store(s, t)
    with popxl.Session(ir, "ipu_model") as session:
        first, again = session.run(), session.run()
    np.testing.assert_array_equal(first[streams[0]], again[streams[0]])  # same seed, same draw
    assert abs(first[streams[0]].mean() - 1.0) < 0.1 and abs(first[streams[0]].std() - 0.5) < 0.1
    survivors = first[streams[1]][first[streams[1]] != 0]
    np.testing.assert_allclose(survivors, 1 / 0.75)
    assert 0.15 < 1 - survivors.size / 1000 < 0.35
""")

program("io_tiles", """
    import numpy as np
    import popxl
    import popxl.ops as ops

    ir = popxl.Ir()
    opts = ir._pb_ir.getSessionOptions()
    opts.numIOTiles = 2  # of the ipu_model's 4 tiles
    with ir.main_graph:
        x_h2d = popxl.h2d_stream((4,), popxl.float32, "x")
        y_d2h = popxl.d2h_stream((4,), popxl.float32, "y")
        with popxl.transforms.io_tile_exchange():
            x_io = ops.host_load(x_h2d)
        y = ops.relu(ops.io_tile_copy(x_io))
        with popxl.io_tiles():
            y_io = ops.io_tile_copy(y)
        with popxl.transforms.merge_exchange():
            ops.host_store(y_d2h, y_io)
    assert x_io.tile_set == "io" and y.tile_set == "compute"
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run({x_h2d: np.array([-1, 2, -3, 4], np.float32)})
    np.testing.assert_array_equal(out[y_d2h], [0, 2, 0, 4])
""")

program("multi_ipu", """
    import numpy as np
    import popxl
    import popxl.ops as ops

    ir = popxl.Ir()
    with ir.main_graph:
        with popxl.ipu(0):
            a = popxl.variable(np.array([1.0, 2.0], np.float32), name="a")
            b = a * 3.0
        with popxl.ipu(1):
            c = ops.ipu_copy(b, 1) + 1.0
        d = c.copy_to_ipu(0)
        d2h = popxl.d2h_stream(d.shape, d.dtype, "d")
        ops.host_store(d2h, d)
    assert (b.ipu, c.ipu, d.ipu) == (0, 1, 0)
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run()
    np.testing.assert_array_equal(out[d2h], [4.0, 7.0])
""")

program("code_loading", """
    import numpy as np
    import popxl
    import popxl.ops as ops

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.array([3.0], np.float32), name="x")
        square = ir.create_graph(lambda t: t * t, x)
        ops.remote_code_load(square, destination="executable")
        (y,) = ops.call(square, x)
        d2h = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(d2h, y)
    with popxl.Session(ir, "ipu_model") as session:
        assert session.run()[d2h][0] == 9.0
""")

program("fp8_matmul", """
    import numpy as np
    import popxl
    import popxl.ops as ops
    from popxl.fp8_utils import host_pow2scale_cast_from_fp8, host_pow2scale_cast_to_fp8

    rng = np.random.default_rng(5)
    lhs, rhs = rng.normal(size=(4, 8)), rng.normal(size=(8, 3))
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(lhs, popxl.float8_143, name="a", log2_scale=2, nan_on_overflow=False)
        b_h2d = popxl.h2d_stream(rhs.shape, popxl.float8_152, "b")
        b = ops.host_load(b_h2d)
        log2_scale = popxl.variable(np.int32(-3), name="log2_scale")
        c = ops.matmul_pow2scaled(a, b, log2_scale)
        d2h = popxl.d2h_stream(c.shape, c.dtype, "c")
        ops.host_store(d2h, c)
    b_bits = host_pow2scale_cast_to_fp8(rhs, popxl.float8_152, 1).view(np.uint8)
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run({b_h2d: b_bits})[d2h]
    assert out.dtype == np.float16
    lhs_q = host_pow2scale_cast_from_fp8(host_pow2scale_cast_to_fp8(lhs, popxl.float8_143, 2),
                                         popxl.float8_143, -2)
    rhs_q = host_pow2scale_cast_from_fp8(b_bits, popxl.float8_152, -1)
    np.testing.assert_allclose(out, lhs_q @ rhs_q, rtol=2e-3, atol=2e-3)  # exact up to fp16
    assert np.abs(out - lhs @ rhs).max() < 0.5  # and fp8 keeps the product roughly right
""")

program("session_data", """
    import numpy as np
    import popxl
    import popxl.ops as ops

    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.zeros(2, np.float32), name="w")
        ops.var_updates.accumulate_(w, popxl.constant(np.ones(2, np.float32)))
    session = popxl.Session(ir, "ipu_model")
    assert session.ir is ir and session.device.name == "ipu_model"
    session.write_variable_data(w, np.array([5.0, 6.0], np.float32))  # before attaching
    with session:
        session.run()
        session.run()
        assert session.get_tensor_data(w).tolist() == [7.0, 8.0]
    assert session.get_tensors_data([w])[w].tolist() == [7.0, 8.0]
""")

program("graph_hooks_and_by_ref", """
    import numpy as np
    import popxl
    import popxl.ops as ops

    created = []
    ir = popxl.Ir()
    handle = ir.main_graph.register_op_created_hook(lambda op: created.append(op.name))

    def scale_in_place(x: popxl.TensorByRef, factor: float):
        ops.var_updates.accumulator_scale_(x, factor)

    with ir.main_graph:
        v = popxl.variable(np.array([2.0, 4.0], np.float32), name="v")
        g = ir.create_graph(scale_in_place, v, 0.5)
        ops.call(g, v)
    ir.main_graph.remove_op_created_hook(handle)
    assert len(created) == 1 and g.id == g.name
    session = popxl.Session(ir, "cpu")
    with session:
        session.run()
    assert session.get_tensor_data(v).tolist() == [1.0, 2.0]
""")


program("mnist_tutorial_structure", """
    # The PopXL MNIST tutorial's program (popxl-reference.md section 1), on synthetic data:
    # Linear modules as subgraphs, call_with_info, two autodiff idioms, in-place SGD, and a
    # separate test Ir that receives the trained weights by name.
    import numpy as np
    import popxl
    import popxl.ops as ops
    import popxl.transforms as transforms

    class Linear(popxl.Module):
        def __init__(self):
            self.W = None
            self.b = None

        def build(self, x, out_features, bias=True):
            self.W = popxl.graph_input((x.shape[-1], out_features), popxl.float32, "W")
            self.b = popxl.graph_input((out_features,), popxl.float32, "b") if bias else None
            y = ops.matmul(x, self.W)
            return ops.gelu(y + self.b if bias else y)

    rng = np.random.default_rng(0)
    n_in, hidden, classes, batch, lr = 12, 8, 3, 16, 0.5
    centres = rng.normal(size=(classes, n_in)) * 2

    def batch_data(size):
        labels = rng.integers(0, classes, size)
        return (centres[labels] + rng.normal(size=(size, n_in))).astype(np.float32), labels

    def create_network(x):
        params = {name: popxl.variable(rng.normal(0, 0.5, shape).astype(np.float32), name=name)
                  for name, shape in (("W0", (n_in, hidden)), ("b0", (hidden,)),
                                      ("W1", (hidden, classes)), ("b1", (classes,)))}
        lin0, lin1 = Linear(), Linear()
        g0 = ir.create_graph(lin0, x, out_features=hidden)
        info0 = ops.call_with_info(g0, x, inputs_dict={lin0.W: params["W0"], lin0.b: params["b0"]})
        x1 = info0.outputs[0]
        g1 = ir.create_graph(lin1, x1, out_features=classes)
        info1 = ops.call_with_info(g1, x1,
                                   inputs_dict={lin1.W: params["W1"], lin1.b: params["b1"]})
        return params, (lin0, g0, info0), (lin1, g1, info1)

    ir = popxl.Ir()
    ir.num_host_transfers = 1
    with ir.main_graph, popxl.in_sequence():
        img = popxl.h2d_stream((batch, n_in), popxl.float32, "img")
        lab = popxl.h2d_stream((batch,), popxl.int32, "labels")
        x, labels = ops.host_load(img, "x"), ops.host_load(lab, "labels")
        params, (lin0, g0, info0), (lin1, g1, info1) = create_network(x)
        probs = ops.softmax(info1.outputs[0], axis=-1)
        loss, dy = ops.nll_loss_with_softmax_grad(probs, labels)
        bwd1 = transforms.autodiff(g1)
        grad_call1 = ops.call_with_info(bwd1.graph, dy, inputs_dict=bwd1.inputs_dict(info1))
        grads1 = bwd1.fwd_parent_ins_to_grad_parent_outs(info1, grad_call1)
        bwd0 = transforms.autodiff(g0, grads_required=[lin0.W, lin0.b])
        dW0, db0 = ops.call(bwd0.graph, grads1[info0.outputs[0]],
                            inputs_dict=bwd0.inputs_dict(info0))
        for p, g in ((params["W0"], dW0), (params["b0"], db0),
                     (params["W1"], grads1[params["W1"]]), (params["b1"], grads1[params["b1"]])):
            ops.scaled_add_(p, g, b=-lr)
        loss_stream = popxl.d2h_stream(loss.shape, loss.dtype, "loss_stream")
        ops.host_store(loss_stream, loss)
    train = popxl.Session(ir, "ipu_model")
    losses = []
    with train:
        for _ in range(60):
            xs, ys = batch_data(batch)
            losses.append(float(train.run({img: xs, lab: ys.astype(np.int32)})[loss_stream]))
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:10])
    trained = train.get_tensors_data(list(params.values()))

    ir = popxl.Ir()
    with ir.main_graph:
        test_img = popxl.h2d_stream((64, n_in), popxl.float32, "test_img")
        test_params, _, (_, _, out_info) = create_network(ops.host_load(test_img))
        out_stream = popxl.d2h_stream((64, classes), popxl.float32, "out")
        ops.host_store(out_stream, out_info.outputs[0])
    test = popxl.Session(ir, "ipu_model")
    by_name = {v.name: data for v, data in trained.items()}
    test.write_variables_data({v: by_name[v.name] for v in test_params.values()})
    xs, ys = batch_data(64)
    with test:
        accuracy = np.mean(np.argmax(test.run({test_img: xs})[out_stream], -1) == ys)
    assert accuracy > 0.8, accuracy
""")

@pytest.fixture
def popxl_alias():
    popxl_compat.install()
    yield
    popxl_compat.uninstall()


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_popxl_program_runs_unchanged(name: str, popxl_alias: None) -> None:
    if name == "fp8_matmul":
        pytest.importorskip("ml_dtypes")
    exec(compile(PROGRAMS[name], f"{name}.py", "exec"), {"__name__": "__main__"})  # noqa: S102
