"""Tutorial 1, basic concepts: an MNIST MLP as an ``addons.Module``, built once with a
``GraphCache``, differentiated with ``addons.autodiff`` and trained with plain SGD.

Run: ``python -m xlgraph.popxl_compat examples/addons/basic_concepts.py``
"""

from functools import partial

import numpy as np
import popxl
import popxl.ops as ops
import popxl_addons as addons
from mnist_utils import Batches, Timer, accuracy, load_inputs, parser, session


class Linear(addons.Module):
    def __init__(self, out_features: int, bias: bool = True):
        super().__init__()
        self.out_features = out_features
        self.bias = bias

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        # add a state variable to the module
        w = self.add_variable_input(
            "weight", partial(np.random.normal, 0, 0.02, (x.shape[-1], self.out_features)),
            x.dtype)
        y = x @ w
        if self.bias:
            b = self.add_variable_input("bias", partial(np.zeros, y.shape[-1]), x.dtype)
            y = y + b
        return y


class Net(addons.Module):
    def __init__(self, cache: addons.GraphCache | bool = False):
        # with a cache, fc1..fc4 become calls of outlined graphs: fc2 and fc3 are alike
        # (same class, settings and input spec), so one graph serves both
        super().__init__(cache=cache)
        self.fc1 = Linear(512)
        self.fc2 = Linear(512)
        self.fc3 = Linear(512)
        self.fc4 = Linear(10)

    def build(self, x: popxl.Tensor):
        x = x.reshape((-1, 28 * 28))
        x = ops.gelu(self.fc1(x))
        x = ops.gelu(self.fc2(x))
        x = ops.gelu(self.fc3(x))
        x = self.fc4(x)
        return x


def sgd(variables, grads, opts):
    for t in variables.tensors:
        ops.scaled_add_(t, grads[t], b=-opts.lr)


def train_program(opts, cache, optimizer=sgd):
    ir = popxl.Ir(replication=1)
    with ir.main_graph:
        streams, img_t, labels = load_inputs(opts.batch_size)

        # forward graph and the factories of its variables
        facts, fwd_graph = Net(cache).create_graph(img_t)
        # backward graph
        bwd_graph = addons.autodiff(fwd_graph)
        # initialise the variables in the main graph
        variables = facts.init()

        fwd_info = fwd_graph.bind(variables).call_with_info(img_t)
        x = fwd_info.outputs[0]
        loss, dx = addons.ops.cross_entropy_with_grad(x, labels)
        loss_stream = popxl.d2h_stream(loss.shape, loss.dtype, "loss")
        ops.host_store(loss_stream, loss)

        activations = bwd_graph.grad_graph_info.inputs_dict(fwd_info)
        bwd_info = bwd_graph.call_with_info(dx, args=activations)

        grads = bwd_graph.grad_graph_info.fwd_parent_ins_to_grad_parent_outs(fwd_info, bwd_info)
        optimizer(variables, grads, opts)
    ir.num_host_transfers = 1
    return session(ir, opts.device), streams, variables, loss_stream


def test_program(opts, cache):
    ir = popxl.Ir(replication=1)
    with ir.main_graph:
        in_stream = popxl.h2d_stream((opts.test_batch_size, 28, 28), popxl.float32, "image")
        in_t = ops.host_load(in_stream)
        facts, graph = Net(cache).create_graph(in_t)
        variables = facts.init()
        (outputs,) = graph.bind(variables).call(in_t)
        out_stream = popxl.d2h_stream(outputs.shape, outputs.dtype, "outputs")
        ops.host_store(out_stream, outputs)
    ir.num_host_transfers = 1
    return session(ir, opts.device), [in_stream], variables, out_stream


def evaluate(opts, trained):
    """Test accuracy of the network whose variables hold ``trained`` ({name: array})."""
    test_data = Batches(False, opts.test_batch_size, opts.datasets_dir, opts.limit_nbatches)
    test_session, [in_stream], test_variables, out_stream = test_program(opts,
                                                                         addons.GraphCache())
    # the same names in both programs: write the trained values by name
    test_session.write_variables_data({var: trained[name].copy()
                                       for name, var in test_variables.named_tensors.items()})
    with test_session:
        scores = [accuracy(test_session.run({in_stream: data})[out_stream], labels)
                  for data, labels in test_data]
    result = float(np.mean(scores))
    print(f"Accuracy on test set: {result:.2f}%")
    return result


def fit(opts, program, train_data, split=None):
    """Train with ``program = (session, streams, variables, loss_stream)``, then test.

    ``split`` reshapes each host array (e.g. into one slice per replica)."""
    train_session, streams, variables, loss_stream = program
    with Timer("training") as timer, train_session:
        for epoch in range(opts.epochs):
            for batch in train_data:
                arrays = [split(a) if split else a for a in batch]
                losses = train_session.run(dict(zip(streams, arrays)))[loss_stream]
            print(f"epoch {epoch + 1}: last loss(es) {np.round(losses, 4)}")
    trained = train_session.get_tensors_data(variables.tensors)
    trained = {name: trained[t] for name, t in variables.named_tensors.items()}
    return {"accuracy": evaluate(opts, trained), "train_seconds": timer.elapsed,
            "last_losses": losses}


def main(argv=None, description="addons tutorial 1: basic concepts", lr=0.05, optimizer=sgd):
    opts = parser(description, lr=lr).parse_args(argv)
    np.random.seed(42)
    train_data = Batches(True, opts.batch_size, opts.datasets_dir, opts.limit_nbatches)
    return fit(opts, train_program(opts, addons.GraphCache(), optimizer), train_data)


if __name__ == "__main__":
    main()
