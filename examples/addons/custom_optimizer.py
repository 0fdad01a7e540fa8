"""Tutorial 2, a custom optimiser: Adam written as an ``addons.Module`` whose state (the
moments) are its own variables, built once per trained variable through a ``GraphCache``.

Run: ``python -m xlgraph.popxl_compat examples/addons/custom_optimizer.py``
"""

from functools import partial

import basic_concepts
import numpy as np
import popxl
import popxl.ops as ops
import popxl_addons as addons


class Adam(addons.Module):
    # run the ops in the order they are written
    @popxl.in_sequence(True)
    def build(self, weight: popxl.TensorByRef, grad: popxl.Tensor, *,
              lr: float | popxl.Tensor, beta1: float | popxl.Tensor = 0.9,
              beta2: float | popxl.Tensor = 0.999, eps: float | popxl.Tensor = 1e-5,
              weight_decay: float | popxl.Tensor = 0.0,
              first_order_dtype: popxl.dtype = popxl.float16, bias_correction: bool = True):
        # gradient estimators for the variable: same shape as the variable, passed by reference
        first_order = self.add_variable_input(
            "first_order", partial(np.zeros, weight.shape), first_order_dtype, by_ref=True)
        ops.var_updates.accumulate_moving_average_(first_order, grad, f=beta1)

        second_order = self.add_variable_input(
            "second_order", partial(np.zeros, weight.shape), popxl.float32, by_ref=True)
        ops.var_updates.accumulate_moving_average_square_(second_order, grad, f=beta2)

        # a step counter for bias correction
        if bias_correction:
            step = self.add_variable_input("step", partial(np.zeros, ()), popxl.float32,
                                           by_ref=True)
        else:
            step = None

        # the weight increment of the Adam heuristic
        updater = ops.var_updates.adam_updater(
            first_order, second_order, weight=weight, weight_decay=weight_decay,
            time_step=step, beta1=beta1, beta2=beta2, epsilon=eps)
        # in-place update: w += (-lr) * dw
        ops.scaled_add_(weight, updater, b=-lr)


def optimizer_step(variables, grads: dict, opts):
    optimizer = Adam()
    cache = addons.GraphCache()
    for name, var in variables.named_tensors.items():
        # one graph per variable shape; one state per variable
        # (float32 first moments: numpy's float16 arithmetic is slow on a CPU)
        opt_facts, opt_graph = cache.create_graph(optimizer, var, var.spec, lr=opts.lr,
                                                  bias_correction=True,
                                                  first_order_dtype=popxl.float32)
        state = opt_facts.init(prefix=f"{name}.adam")
        # both the state and the variable are passed by reference: updated in place
        opt_graph.bind(state).call(var, grads[var])


def main(argv=None):
    # tutorial 1's network, data and training loop, with this optimiser
    return basic_concepts.main(argv, "addons tutorial 2: a custom Adam optimiser", lr=1e-3,
                               optimizer=optimizer_step)


if __name__ == "__main__":
    main()
