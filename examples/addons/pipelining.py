"""Tutorial 4, pipelining: tutorial 1's network cut into two stages on two IPUs. Each
``session.run`` trains on ``--gradient-accumulation`` micro-batches that flow through the
pipeline; the accumulated (mean) gradients update the weights once per run.

Run: ``python -m xlgraph.popxl_compat examples/addons/pipelining.py``
"""

import numpy as np
import popxl
import popxl.ops as ops
import popxl_addons as addons
from basic_concepts import Linear, fit
from mnist_utils import Batches, parser, session


class Stage0(addons.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = Linear(512)
        self.fc2 = Linear(512)

    def build(self, x):
        x = x.reshape((-1, 28 * 28))
        return ops.gelu(self.fc2(ops.gelu(self.fc1(x))))


class Stage1(addons.Module):
    def __init__(self):
        super().__init__()
        self.fc3 = Linear(512)
        self.fc4 = Linear(10)

    def build(self, x):
        return self.fc4(ops.gelu(self.fc3(x)))


def sgd(variables, accum, lr):
    for name, var in variables.named_tensors.items():
        ops.scaled_add_(var, accum.accum.get(name), b=-lr)
    ops.var_updates.accumulator_scale_(accum.mean_accum_counter, 0.0)


def train_program(opts):
    ir = popxl.Ir(replication=1)
    steps = opts.gradient_accumulation
    with ir.main_graph, popxl.in_sequence():
        img_stream = popxl.h2d_stream((opts.batch_size, 28, 28), popxl.float32, "image")
        label_stream = popxl.h2d_stream((opts.batch_size,), popxl.int32, "labels")
        with popxl.ipu(0):
            facts0, fwd0 = Stage0().create_graph(popxl.TensorSpec(img_stream.shape,
                                                                  popxl.float32))
            accum_facts0, bwd0 = addons.autodiff_with_accumulation(
                fwd0, fwd0.args.tensors, grads_required=[])
        with popxl.ipu(1):
            facts1, fwd1 = Stage1().create_graph(popxl.TensorSpec((opts.batch_size, 512),
                                                                  popxl.float32))
            # stage 1 also returns the gradient of its input, for stage 0
            accum_facts1, bwd1 = addons.autodiff_with_accumulation(
                fwd1, fwd1.args.tensors, grads_required=fwd1.graph.inputs[:1])
        # the variables once every graph exists (each factory probed its initialiser once)
        with popxl.ipu(0):
            variables0, accum0 = facts0.init("fc_0"), accum_facts0.init()
        with popxl.ipu(1):
            variables1, accum1 = facts1.init("fc_1"), accum_facts1.init()

        loss_stream = popxl.d2h_stream((), popxl.float32, "loss")
        with addons.pipelined_execution(steps) as p:
            with p.stage(0), popxl.ipu(0):
                img = ops.host_load(img_stream)
                info0 = fwd0.bind(variables0).call_with_info(img)
                x = info0.outputs[0].copy_to_ipu(1)
            with p.stage(1), popxl.ipu(1):
                labels = ops.host_load(label_stream, "labels")
                info1 = fwd1.bind(variables1).call_with_info(x)
                loss, dx = addons.ops.cross_entropy_with_grad(info1.outputs[0], labels)
                ops.host_store(loss_stream, loss)
                (dx,) = bwd1.bind(accum1).call(dx, args=bwd1.grad_graph_info.inputs_dict(info1))
                dx = dx.copy_to_ipu(0)
            with p.stage(2), popxl.ipu(0):
                bwd0.bind(accum0).call(dx, args=bwd0.grad_graph_info.inputs_dict(info0))
        with popxl.ipu(0):
            sgd(variables0, accum0, opts.lr)
        with popxl.ipu(1):
            sgd(variables1, accum1, opts.lr)
    ir.num_host_transfers = steps
    variables = addons.NamedTensors.from_dict({**variables0.named_tensors,
                                               **variables1.named_tensors})
    return session(ir, opts.device, num_ipus=2), [img_stream, label_stream], variables, loss_stream


def main(argv=None):
    p = parser("addons tutorial 4: pipelining", lr=0.05)
    p.add_argument("--gradient-accumulation", type=int, default=4)
    opts = p.parse_args(argv)
    np.random.seed(42)
    train_data = Batches(True, opts.batch_size, opts.datasets_dir, opts.limit_nbatches,
                         group=opts.gradient_accumulation)

    # each run takes (micro-batches, batch, ...) arrays
    return fit(opts, train_program(opts), train_data)

if __name__ == "__main__":
    main()
