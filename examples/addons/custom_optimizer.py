"""Tutorial 2, a custom optimiser: Adam written as an ``addons.Module`` whose state (the
moments) are its own variables, built once per trained variable through a ``GraphCache``.

Run: ``python -m xlgraph.popxl_compat examples/addons/custom_optimizer.py``
"""

from functools import partial

import numpy as np
import popxl
import popxl.ops as ops
import popxl_addons as addons
from basic_concepts import Net
from mnist_utils import Batches, Timer, accuracy, parser, session


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


def optimizer_step(variables, grads: dict[popxl.Tensor, popxl.Tensor], optimizer: addons.Module,
                   lr: float, cache: addons.GraphCache):
    for name, var in variables.named_tensors.items():
        # one graph per variable shape; one state per variable
        # float32 first moments: numpy's float16 arithmetic is slow on a CPU
        opt_facts, opt_graph = cache.create_graph(optimizer, var, var.spec, lr=lr,
                                                  bias_correction=True,
                                                  first_order_dtype=popxl.float32)
        state = opt_facts.init(prefix=f"{name}.adam")
        # both the state and the variable are passed by reference: updated in place
        opt_graph.bind(state).call(var, grads[var])


def train_program(opts):
    ir = popxl.Ir(replication=1)
    with ir.main_graph:
        img_stream = popxl.h2d_stream((opts.batch_size, 28, 28), popxl.float32, "image")
        img_t = ops.host_load(img_stream)
        label_stream = popxl.h2d_stream((opts.batch_size,), popxl.int32, "labels")
        labels = ops.host_load(label_stream, "labels")

        facts, fwd_graph = Net().create_graph(img_t)
        bwd_graph = addons.autodiff(fwd_graph)
        variables = facts.init()

        fwd_info = fwd_graph.bind(variables).call_with_info(img_t)
        x = fwd_info.outputs[0]
        loss, dx = addons.ops.cross_entropy_with_grad(x, labels)
        loss_stream = popxl.d2h_stream(loss.shape, loss.dtype, "loss")
        ops.host_store(loss_stream, loss)

        activations = bwd_graph.grad_graph_info.inputs_dict(fwd_info)
        bwd_info = bwd_graph.call_with_info(dx, args=activations)
        grads = bwd_graph.grad_graph_info.fwd_parent_ins_to_grad_parent_outs(fwd_info, bwd_info)

        optimizer_step(variables, grads, Adam(), opts.lr, addons.GraphCache())
    ir.num_host_transfers = 1
    return session(ir, opts.device), [img_stream, label_stream], variables, loss_stream


def test_program(opts):
    ir = popxl.Ir(replication=1)
    with ir.main_graph:
        in_stream = popxl.h2d_stream((opts.test_batch_size, 28, 28), popxl.float32, "image")
        in_t = ops.host_load(in_stream)
        facts, graph = Net().create_graph(in_t)
        variables = facts.init()
        (outputs,) = graph.bind(variables).call(in_t)
        out_stream = popxl.d2h_stream(outputs.shape, outputs.dtype, "outputs")
        ops.host_store(out_stream, outputs)
    return session(ir, opts.device), in_stream, variables, out_stream


def main(argv=None):
    opts = parser("addons tutorial 2: a custom Adam optimiser", lr=1e-3).parse_args(argv)
    np.random.seed(42)
    train_data = Batches(True, opts.batch_size, opts.datasets_dir, opts.limit_nbatches)
    test_data = Batches(False, opts.test_batch_size, opts.datasets_dir, opts.limit_nbatches)

    train_session, streams, train_variables, loss_stream = train_program(opts)
    with Timer("training") as timer, train_session:
        for epoch in range(opts.epochs):
            for data, labels in train_data:
                loss = train_session.run(dict(zip(streams, [data, labels])))[loss_stream]
            print(f"epoch {epoch + 1}: last loss {float(loss):.4f}")
    trained = train_session.get_tensors_data(train_variables.tensors)

    test_session, in_stream, test_variables, out_stream = test_program(opts)
    test_session.write_variables_data(
        {test: trained[train].copy()
         for train, test in train_variables.to_mapping(test_variables).items()})
    with test_session:
        scores = [accuracy(test_session.run({in_stream: data})[out_stream], labels)
                  for data, labels in test_data]
    result = float(np.mean(scores))
    print(f"Accuracy on test set: {result:.2f}%")
    return {"accuracy": result, "train_seconds": timer.elapsed}


if __name__ == "__main__":
    main()
