"""``popxl_addons.performance_utils`` and ``testing_utils``."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

import xlgraph as popxl
import xlgraph.addons as addons
from xlgraph import ops
from xlgraph.addons.testing_utils import TensorInput, ops_of_type, run_module
from xlgraph.popart_compat._internal import ir as _ir


def flops_ir(replicas=1):
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        a = popxl.variable(np.ones((4, 3), np.float32))
        b = popxl.variable(np.ones((3, 5), np.float32))
        y = a @ b  # 2 * 3 * 20 = 120
        z = y + y  # 20
        ops.relu(z)  # not counted
        ops.host_store(popxl.d2h_stream(z.shape, z.dtype), z)  # no outputs: not counted
        body = ir.create_graph(lambda t: t * 2.0, z)  # 20 per iteration
        ops.repeat(body, 3, z)
        norm = ir.create_graph(lambda t, w, bb: ops.group_norm(t, w, bb, 2),
                               popxl.TensorSpec((2, 4, 3), popxl.float32),
                               popxl.TensorSpec((4,), popxl.float32),
                               popxl.TensorSpec((4,), popxl.float32))
        ops.call(norm, popxl.variable(np.ones((2, 4, 3), np.float32)),
                 popxl.variable(np.ones(4, np.float32)), popxl.variable(np.ones(4, np.float32)))
    return ir


def test_flops_count_the_librarys_op_types():
    """Keys are PopART op ids; a call or repeat site's counts sit under each op type of the
    called graph, keyed ``<OpType>_<id>(<graph>)``."""
    ir = flops_ir()
    counts = addons.evaluate_FLOPs(ir.main_graph)
    ids = {v.opType(): v.id for v in ir.main_graph._pb_graph.getOps()}
    assert counts["MatMul"] == {ids["MatMul"]: 120} and counts["Add"] == {ids["Add"]: 20}
    assert "Relu" not in counts
    body = next(g for g in ir.graphs if g.ops and g.ops[0].defn.name == "mul")
    (mul_id,) = [v.id for v in body._pb_graph.getOps()]
    loop_key = f"Loop_{ids['Loop']}({body.name.split('_subgraph')[0]})"
    assert counts["Mul"] == {loop_key: {mul_id: 60}}  # 20 per iteration, 3 iterations
    (norm,) = counts["GroupNormalization"].values()
    # a = 4*3/2 = 6, M = 2 rows x 2 groups = 4, O = 24: 3a + 2M + 4O
    assert list(norm.values()) == [3 * 6 + 2 * 4 + 4 * 24]
    assert counts["TOT"] == 120 + 20 + 60 + 3 * 6 + 2 * 4 + 4 * 24
    assert addons.total_FLOPs(flops_ir(2)) == 2 * counts["TOT"]


def test_op_ids_count_from_100_per_ir():
    ir = popxl.Ir()
    with ir.main_graph:
        a, b, c = (popxl.variable(np.ones((2, 2), np.float32)) for _ in range(3))
        y = a @ b
        z = y.T
        z @ c
    views = ir.main_graph._pb_graph.getOps()
    assert [(v.opType(), v.id) for v in views] == [("MatMul", 100), ("Transpose", 101),
                                                  ("MatMul", 102)]


def test_flops_formatting_and_printing(capsys):
    f = addons.format_flops_scientific
    assert f(5e5) == "0.500E+06" and f(2.5e4) == "25.000E+03" and f(1234) == "1.234E+03"
    assert f(2e6, "K") == "2000.000E+03" and f(3e9, "G") == "3.000E+09"
    with pytest.raises(ValueError):
        f(1, "P")
    addons.print_FLOPs(addons.evaluate_ir_FLOPs(flops_ir()))
    text = capsys.readouterr().out
    assert text.splitlines()[0].startswith("GroupNormalization  0.122E+03")  # largest first
    assert text.splitlines()[1].startswith("MatMul") and "TOTAL" in text
    addons.print_FLOPs(addons.evaluate_ir_FLOPs(flops_ir()), mode="flat", numerical_format="K")
    assert "E+03" in capsys.readouterr().out


class Affine(addons.Module):
    def build(self, x, scale=2.0):
        w = self.add_variable_input("w", partial(np.ones, x.shape[-1], np.float32))
        return x * w * scale, x + w


def test_run_module_and_tensor_input():
    x = np.arange(3, dtype=np.float32)
    y, z = run_module(Affine(), TensorInput(x), scale=3.0)
    np.testing.assert_allclose(y, 3 * x) and np.testing.assert_allclose(z, x + 1)
    (y, _) = run_module(Affine(), TensorInput(x), weights={"w": np.full(3, 2, np.float32)})
    np.testing.assert_allclose(y, 4 * x)
    (y, _) = run_module(Affine(), TensorInput(x),
                        weights=lambda v: {v.w: np.full(3, 5, np.float32)})
    np.testing.assert_allclose(y, 10 * x)
    with pytest.raises(ValueError, match="float64"):
        TensorInput(np.zeros(2))
    assert TensorInput(np.zeros(2), popxl.float32).dtype == popxl.float32


def test_ops_of_type_counts_views_names_and_classes():
    ir = flops_ir()
    ops_ = ir.main_graph._pb_graph.getOps()
    assert ops_of_type(ops_, _ir.op.MatMulOp) == 1
    assert ops_of_type(ops_, "Add") == 1 and ops_of_type(ops_, "AddOp") == 1
    assert ops_of_type(ir.main_graph.ops, _ir.op.MatMulOp) == 1
    assert ops_of_type(ops_, _ir.op.collectives.ReplicatedAllReduceOp) == 0
