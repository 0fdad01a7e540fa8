"""The PopART views PopXL programs read (``ir._pb_ir``, ``graph._pb_graph``,
``session._pb_session``) and the compat runner's ``popart`` stand-in."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops
from xlgraph.core.pb_views import PopartViewError, op_type
from xlgraph.popart_compat._internal import ir as _ir

ROOT = Path(__file__).resolve().parents[2]


def small_ir():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((2, 2), np.float32), name="x")
        g = ir.create_graph(lambda a: ops.relu(a @ a), x)
        (y,) = ops.call(g, x)
        y += 1.0
    return ir, g


def test_graphs_ops_tensors_and_types():
    ir, g = small_ir()
    graphs = ir._pb_ir.getAllGraphs()
    assert [gr.id.str() for gr in graphs] == ["main", g.id]
    assert ir._pb_ir.getMainGraph().getOps()[0].opid.type == "Call"
    ops_ = g._pb_graph.getOps()
    assert [o.opid.type for o in ops_] == ["MatMul", "Relu"]
    mm = ops_[0]
    assert isinstance(mm, _ir.op.MatMulOp) and isinstance(mm, _ir.Op)
    assert not isinstance(mm, _ir.op.ReluOp)
    assert mm.inTensor(0).id == g.inputs[0].id and mm.outId(0) == mm.outTensor(0).id
    assert mm.outTensor(0).info.shape() == [2, 2] and mm.inTensor(0).info.dataType() == "FLOAT"
    assert mm.outTensor(0).getProducer().id == mm.id
    assert g._pb_graph.getInputIds() == [t.id for t in g.inputs]
    assert len({o.id for o in ir._pb_ir.getAllOps()}) == len(ir._pb_ir.getAllOps())
    assert ir._pb_ir.getMainGraph().getTensor("x").tensorType() == "Variable"
    assert ir._pb_ir.getGraph(g.id).getCalledGraphs() == []
    assert ir._pb_ir.getSessionOptions() is ir._pb_ir.getSessionOptions()


def test_type_names():
    assert op_type("matmul") == "MatMul" and op_type("add_") == "AddLhsInplace"
    assert op_type("relu_") == "ReluInplace" and op_type("scaled_add_") == "ScaledAddLhsInplace"
    assert op_type("replicated_all_reduce") == "ReplicatedAllReduce"
    assert op_type("repeat") == "Loop" and op_type("group_norm") == "GroupNormalization"


def test_unanswerable_calls_fail_in_one_line_naming_the_support_page():
    ir, g = small_ir()
    for call in (lambda: g._pb_graph.getOps()[0].settings, lambda: ir._pb_ir.applyPatterns,
                 lambda: g._pb_graph.topoCons, lambda: _ir.PatternNames):
        with pytest.raises(AttributeError) as err:
            call()
        assert "popxl-compat.md" in str(err.value) and "\n" not in str(err.value)
    assert issubclass(PopartViewError, AttributeError)


def test_session_engine_flag():
    ir, _ = small_ir()
    with popxl.Session(ir, "cpu") as s:
        s._pb_session.setEngineIsLoaded(True)
        assert s._pb_session.getEngineIsLoaded()


def test_the_runners_popart_stand_in(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        import popart
        import popart._internal.ir as _ir
        import popxl
        from popxl import ops

        assert popart.versionString() == "3.4.0"
        assert popart.DeviceInfo().numIpus == 1
        ir = popxl.Ir()
        with ir.main_graph:
            x = popxl.variable(np.ones((2, 3), np.float32))
            try:
                x @ x
            except popart.popart_exception as e:
                print("caught", type(e).__name__)
            y = ops.collectives.replicated_all_reduce(x)
        found = [op for op in ir.main_graph._pb_graph.getOps()
                 if isinstance(op, _ir.op.collectives.ReplicatedAllReduceOp)]
        print("all-reduce ops:", len(found))
        assert issubclass(popart.poplar_application_runtime_error, popart.popart_exception)
    """))
    out = subprocess.run([sys.executable, "-m", "xlgraph.popxl_compat", str(script)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert "caught ShapeError" in out.stdout and "all-reduce ops: 1" in out.stdout
