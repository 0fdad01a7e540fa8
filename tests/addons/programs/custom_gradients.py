"""popxl-addons user program: custom gradients, constructor args, factories, testing utils."""
import warnings
from functools import partial

import numpy as np
import popxl
import popxl.ops as ops
import popxl_addons as addons
from checks import check, done, raises
from popart._internal import ir as _ir
from popxl_addons.testing_utils import TensorInput, ops_of_type, run_module
from popxl_addons.variable_factory import VariableFactory


class Scale(addons.Module):
    def build(self, x):
        w = self.add_variable_input("w", partial(np.full, x.shape, 2.0, np.float32))
        self.aux["x"] = x
        self.aux["y"] = x + 1
        self.aux["k"] = 3
        return x * w
    def build_grad(self, dy):
        check("10 non-tensor aux", self.aux["k"] == 3)
        self.var_grad["w"] = dy * self.aux["x"]
        return dy * self.aux["x"]

# 14
raises("14 cache+build_grad", ValueError, lambda: Scale(cache=True))
raises("14 bad inlining", ValueError, lambda: addons.Module(grad_inlining_error="bogus"))
ir = popxl.Ir()
with ir.main_graph:
    spec = popxl.TensorSpec((2,), popxl.float32)
    m = Scale()
    facts, fwd = m.create_graph(spec)
    check("11 aux emptied", len(m.aux) == 0)
    check("11 aux copy", list(fwd.aux) == ["x", "y", "k"])
    n_out = len(fwd.graph.outputs)
    bwd = fwd.autodiff()
    # 11: every tensor aux appended as output (read or not): x is an input, y internal
    check("11 aux outputs appended", len(fwd.graph.outputs) == n_out + 2)
    info = bwd.grad_graph_info
    check("13 inputs", [c.connection_type.name for c in info.expected_inputs] == ["FwdGrad", "Fwd"])
    check("13 outputs", len(info.expected_outputs) == 2)
    raises("grad_graph_info on fwd", AttributeError, lambda: fwd.grad_graph_info)
    # 14 inline call of a build_grad module
    class Outer(addons.Module):
        def build(self, x):
            return Scale()(x)
    raises("14 inline error", Exception, lambda: Outer().create_graph(spec))
    class OuterW(addons.Module):
        def __init__(self):
            super().__init__(grad_inlining_error="warning")
            self.s = Scale(grad_inlining_error="warning")
        def build(self, x):
            return self.s(x)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        OuterW().create_graph(spec)
    check("14 warning", len(rec) >= 1)
    # 16 call_module autodiff registers
    class CM(addons.Module):
        def build(self, x):
            call = self.call_module(Scale(), name="sc")
            (y,) = call(x)
            check("16 call keeps graph", hasattr(call, "graph") and hasattr(call, "var_factories"))
            return y
    cf, cg = CM().create_graph(spec)
    check("16 names", cg.args.keys_flat() == ["sc.w"])
    cbwd = cg.autodiff()
    x = popxl.variable(np.array([1.0, 2.0], np.float32), name="x")
    cv = cf.init()
    fi = cg.bind(cv).call_with_info(x)
    grads = cbwd.call(popxl.constant(np.ones(2, np.float32)),
                      args=cbwd.grad_graph_info.inputs_dict(fi))
    dx_stream = popxl.d2h_stream((2,), popxl.float32, "dx")
    ops.host_store(dx_stream, grads[0])
with popxl.Session(ir, "ipu_model") as s:
    out = s.run()
check("16 build_grad used via call_module", np.allclose(out[dx_stream], [1.0, 2.0]))

# from_list
class Id(addons.Module):
    def build(self, x):
        w = self.add_variable_input("w", partial(np.ones, x.shape, np.float32))
        return x * w
seq = Id.from_list([Id(), Id()])
check("from_list iter", len(list(seq)) == 2)
check("get", seq.get(0) is seq[0] and seq["1"] is seq[1])
raises("iter non-list", AttributeError, lambda: list(Id()))

# add_variable_inputs: one graph, two weight sets under "0" and "1"
class Twice(addons.Module):
    def build(self, x):
        facts, graph = Id().create_graph(x)
        for i in range(2):
            x = graph.bind(self.add_variable_inputs(i, facts)).call(x)[0]
        return x


ir = popxl.Ir()
with ir.main_graph:
    tf, tg = Twice().create_graph(popxl.TensorSpec((2,), popxl.float32))
    check("6 add_variable_inputs names", tg.args.keys_flat() == ["0.w", "1.w"])

# 19 factories
ir = popxl.Ir(replication=4)
with ir.main_graph:
    counter = iter(range(100))
    f = VariableFactory(lambda: np.full((2,), next(counter), np.float32),
                        replica_grouping=ir.replica_grouping(group_size=2))
    check("19 probe once", next(counter) == 1)
    var = f.create_var() if hasattr(f, "create_var") else f.create_tensor()
    check("19 stacked per group", var.shape_on_host == (2, 2))
    raises("19 not iterable", ValueError, lambda: VariableFactory(5))
    sh = VariableFactory(lambda: np.zeros((4, 2), np.float32), shard_over=4)
    check("8 shard shape", sh.shape == (2,) and tuple(sh.meta_shape) == (4, 2))

# 24 ops_of_type / run_module
class Sq(addons.Module):
    def build(self, x):
        w = self.add_variable_input("w", partial(np.full, x.shape, 3.0, np.float32))
        return x * w + x
outs = run_module(Sq(), TensorInput(np.array([1.0, 2.0], np.float32)))
check("24 run_module list", isinstance(outs, list) and np.allclose(outs[0], [4.0, 8.0]))
ir = popxl.Ir()
with ir.main_graph:
    a = popxl.variable(np.ones(2, np.float32))
    b = a + a
    c = a * b + b
pb_ops = ir.main_graph._pb_graph.getOps()
check("24 ops_of_type view class", ops_of_type(pb_ops, _ir.op.AddOp) == 2)
check("24 ops_of_type mul", ops_of_type(pb_ops, _ir.op.MulOp) == 1)
check("24 count is int", isinstance(ops_of_type(pb_ops, _ir.op.MatMulOp), int))
done()
