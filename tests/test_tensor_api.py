"""The IR data model: dtypes, specs, tensors, graphs, create_graph, context helpers, Module."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import errors, ops


def run_main(ir: popxl.Ir, outputs: list[popxl.Tensor]) -> list[np.ndarray]:
    """Store ``outputs`` to streams, run once, return their values."""
    with ir.main_graph:
        streams = [popxl.d2h_stream(t.shape, t.dtype, f"o{i}") for i, t in enumerate(outputs)]
        for s, t in zip(streams, outputs):
            ops.host_store(s, t)
    with popxl.Session(ir) as session:
        got = session.run()
    return [got[s] for s in streams]


def test_dtypes_map_to_numpy_and_back() -> None:
    assert popxl.float32.as_numpy() == np.float32
    assert popxl.dtypes.as_dtype(np.int32) is popxl.int32
    assert popxl.dtypes.as_dtype("uint8") is popxl.uint8
    assert popxl.float is popxl.float32 and popxl.half is popxl.float16
    assert repr(popxl.float32) == "xlgraph.dtypes.float32"
    assert popxl.int8.is_int and popxl.float16.is_floating_point and not popxl.uint32.is_signed
    with pytest.raises(ValueError):
        popxl.dtypes.dtype.from_name("float7")


def test_tensor_spec_is_a_mapping() -> None:
    spec = popxl.TensorSpec((2, 3), popxl.float32)
    assert dict(**spec)["shape"] == (2, 3)
    assert spec == popxl.TensorSpec([2, 3], np.float32)
    assert str(spec) == "f32[2,3]"


def test_tensor_properties_and_naming() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.zeros((2, 3, 4)), name="a")
        b = popxl.variable(np.zeros(2), name="a")
        with popxl.name_scope("layer"):
            c = popxl.constant(1.0, name="k")
    assert (a.shape, a.rank, a.nelms, a.dtype) == ((2, 3, 4), 3, 24, popxl.float32)
    assert a.name == "a" and b.name != "a" and b.name.startswith("a")
    assert c.name == "layer/k"
    assert len(a) == 2
    with pytest.raises(TypeError):
        iter(a)
    with pytest.raises(ValueError):
        len(c)
    assert popxl.variable.__doc__ and "main graph" in popxl.variable.__doc__


def test_variable_downcasts_and_python_scalars() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        assert popxl.variable(np.zeros(2)).dtype is popxl.float32
        assert popxl.variable(np.zeros(2, np.int64)).dtype is popxl.int32
        assert popxl.variable(np.zeros(2), downcast=False).dtype is popxl.float64
        assert popxl.variable(3).dtype is popxl.int32
        assert popxl.variable([1.5]).dtype is popxl.float32


def test_variable_outside_main_graph_is_refused() -> None:
    ir = popxl.Ir()
    graph = ir.create_empty_graph("sub")
    with graph, pytest.raises(errors.GraphMismatchError, match="main graph"):
        popxl.variable(np.zeros(2), name="w")


def test_operators_and_scalar_constants_take_the_tensor_dtype() -> None:
    ir = popxl.Ir()
    xv = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    with ir.main_graph:
        x = popxl.variable(xv, name="x")
        exprs = [x + 1, 1 - x, x * 2, 2 / x, x / 2, x ** 2, 2 ** x, -x, x @ x, x.T, x.reshape((4,)),
                 x.flatten(), x.transpose((1, 0)), x.detach(), x[1], x[:, ::-1], x[0, 1:]]
        assert all(e.dtype is popxl.float32 for e in exprs)
    got = run_main(ir, exprs)
    want = [xv + 1, 1 - xv, xv * 2, 2 / xv, xv / 2, xv ** 2, 2 ** xv, -xv, xv @ xv, xv.T,
            xv.reshape(4), xv.reshape(-1), xv.T, xv, xv[1], xv[:, ::-1], xv[0, 1:]]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_getitem_rejects_other_keys() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros((2, 2)))
        with pytest.raises(TypeError):
            x["a"]


def test_context_helpers() -> None:
    with pytest.raises(RuntimeError, match="no current graph"):
        popxl.gcg()
    ir = popxl.Ir()
    sub = ir.create_empty_graph("g")
    with sub:
        assert popxl.gcg() is sub and popxl.gmg() is ir.main_graph and popxl.gir() is ir
    other = popxl.Ir()
    with ir.main_graph, pytest.raises(RuntimeError, match="another Ir"):
        with other.main_graph:
            pass


def test_create_graph_binds_the_signature() -> None:
    def fn(x, ys, scale, *, bias):
        extra = popxl.graph_input((2,), popxl.float32, "extra")
        return [x * scale + ys[0] + ys[1] + bias, extra]

    ir = popxl.Ir()
    spec = popxl.TensorSpec((2,), popxl.float32)
    with ir.main_graph:
        bias = popxl.variable(np.zeros(2), name="bias")
        graph = ir.create_graph(fn, spec, [spec, spec], 3.0, bias=bias)
    assert [t.name for t in graph.inputs] == ["x", "ys_0", "ys_1", "bias", "extra"]
    assert len(graph.outputs) == 2
    assert graph.name == "test_create_graph_binds_the_signature.fn_subgraph(0)"
    with pytest.raises(ValueError):
        ir.create_graph(lambda x: 3, spec)
    with pytest.raises(ValueError):
        ir.create_graph(fn, spec)


def test_module_runs_inline_or_as_a_graph() -> None:
    class Double(popxl.Module):
        def build(self, x):
            return x + x

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2), name="x")
        inline = Double()(x)
        graph = ir.create_graph(Double(), x.spec)
    assert inline.graph is ir.main_graph
    assert graph.name.endswith(".Double_subgraph(0)") and len(graph.ops) == 1
    with pytest.raises(NotImplementedError):
        popxl.Module().build()


def test_graph_listing_and_properties() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.zeros((8, 32)), name="W0")
        c = popxl.constant(np.zeros((32,)), name="bias")
        y = w + c
        graph = ir.create_graph(lambda a: ops.relu(a), y.spec)
        ops.call(graph, y)
    text = str(ir.main_graph)
    assert "%add:f32[8,32] = add %W0 %bias" in text
    assert ir.main_graph.variables == (w,) and ir.main_graph.constants == (c,)
    assert ir.main_graph.called_graphs == (graph,)
    assert y in ir.main_graph and y not in graph
    assert "relu" in str(graph)


def test_import_does_not_import_torch() -> None:
    code = "import sys, xlgraph, xlgraph.datasets, xlgraph.data; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
