"""popxl-addons user program in the data-parallel tutorial's shape: gradients accumulated by
``autodiff_with_accumulation`` (a running mean with ``mean_accum_counter``), paired with the
variables by ``zip(variables.tensors, accum.tensors)``, reduced over 2 replicas and applied
with ``AdamOptimizerStep``; every value checked against numpy (reference sections 15, 17)."""

from functools import partial

import numpy as np
import popxl
import popxl.ops as ops
import popxl_addons as addons
from checks import check, done
from popxl_addons.optimizers.adam import AdamOptimizerStep


class Lin(addons.Module):
    def build(self, x):
        w = self.add_variable_input("weight", partial(np.full, (3, 2), 0.5, np.float32))
        return x @ w


rng = np.random.default_rng(0)
X = rng.normal(size=(2, 3, 1, 3)).astype(np.float32)  # (replica, micro-batch, 1, 3)
ir = popxl.Ir(replication=2)
with ir.main_graph, popxl.in_sequence():
    facts, fwd = Lin().create_graph(popxl.TensorSpec((1, 3), popxl.float32))
    accum_facts, bwd = addons.autodiff_with_accumulation(
        fwd, tensors_to_accumulate_grads=fwd.args.tensors, grads_required=[])
    variables, accum = facts.init(), accum_facts.init()
    check("15 counter last", accum.tensors[-1].name == "mean_accum_counter")
    x_stream = popxl.h2d_stream((3, 1, 3), popxl.float32, "x")
    xs = ops.host_load(x_stream)
    for i in range(3):  # three micro-batches
        info = fwd.bind(variables).call_with_info(xs[i])
        dy = popxl.constant(np.ones((1, 2), np.float32))  # d(sum y)/dy
        bwd.bind(accum).call(dy, args=bwd.grad_graph_info.inputs_dict(info))
    opt = AdamOptimizerStep()
    for var, grad in zip(variables.tensors, accum.tensors):
        g = ops.collectives.replicated_all_reduce(grad, op="mean")
        opt_facts, opt_graph = opt.create_graph(var, g, lr=0.1, weight_decay=0.0)
        state = opt_facts.init()
        opt_graph.bind(state).call(var, g)
    acc_out = popxl.d2h_stream((3, 2), popxl.float32, "acc")
    ops.host_store(acc_out, accum.accum.weight)
    ops.var_updates.accumulator_scale_(accum.mean_accum_counter, 0.0)  # the reset

with popxl.Session(ir, "ipu_hw") as s:
    outs = s.run({x_stream: X})
    w = s.get_tensor_data(variables.weight)
    counter = s.get_tensor_data(accum.mean_accum_counter)
# the mean over the micro-batches of d(sum(x @ w))/dw = x^T @ ones
want_acc = np.stack([np.mean([X[r, i].T @ np.ones((1, 2)) for i in range(3)], axis=0)
                     for r in range(2)])
check("15 running mean", np.allclose(outs[acc_out], want_acc, atol=1e-6))
g = want_acc.mean(axis=0)
m, v = 0.1 * g, 0.001 * g * g
m_hat, v_hat = m / (1 - 0.9), v / (1 - 0.999)
want_w = 0.5 - 0.1 * (m_hat / (np.sqrt(v_hat) + 1e-5))
check("17 adam step", np.allclose(w, want_w, atol=2e-3))  # float16 first moment
check("15 counter reset", np.all(counter == 0))
done()
