"""Tutorial 3, data parallelism: tutorial 1's network on 2 replicas. Each replica trains on
its own half of every batch; ``autodiff_with_accumulation`` keeps the gradients in named
accumulators, which are averaged over the replicas before the update (SGD, or Adam with
``--optimizer adam``).

Run: ``python -m xlgraph.popxl_compat examples/addons/data_parallel.py``
"""

import numpy as np
import popxl
import popxl.ops as ops
import popxl_addons as addons
from adam_steps import adam_graphs, adam_update
from basic_concepts import Net, fit
from mnist_utils import Batches, load_inputs, parser, session


def train_program(opts):
    ir = popxl.Ir(replication=opts.replicas)
    with ir.main_graph, popxl.in_sequence():
        # every stream carries one replica's micro-batch
        streams, img_t, labels = load_inputs(opts.batch_size)

        facts, fwd_graph = Net().create_graph(img_t)
        # gradients of the variables go to accumulators (no gradient for the image)
        accum_facts, bwd_graph = addons.autodiff_with_accumulation(
            fwd_graph, fwd_graph.args.tensors, grads_required=[])
        variables = facts.init()
        accum = accum_facts.init()

        fwd_info = fwd_graph.bind(variables).call_with_info(img_t)
        loss, dx = addons.ops.cross_entropy_with_grad(fwd_info.outputs[0], labels)
        loss_stream = popxl.d2h_stream(loss.shape, loss.dtype, "loss")
        ops.host_store(loss_stream, loss)
        bwd_graph.bind(accum).call(dx, args=bwd_graph.grad_graph_info.inputs_dict(fwd_info))

        for name, var in variables.named_tensors.items():
            grad = accum.accum.get(name)
            # the mean over the replicas: every replica applies the same update
            ops.collectives.replicated_all_reduce_(grad, op="mean")
            if opts.optimizer == "sgd":
                ops.scaled_add_(var, grad, b=-opts.lr)
        if opts.optimizer == "adam":  # whole Adam state on every replica
            adam_facts, steps = adam_graphs(variables, accum.accum, opts.lr)
            adam_update(steps, adam_facts.init(), variables, accum.accum)
        # the next step starts a new mean
        ops.var_updates.accumulator_scale_(accum.mean_accum_counter, 0.0)
    return session(ir, opts.device), streams, variables, loss_stream


def main(argv=None):
    p = parser("addons tutorial 3: data parallelism", batch_size=4)
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    opts = p.parse_args(argv)
    np.random.seed(42)
    global_batch = opts.batch_size * opts.replicas
    train_data = Batches(True, global_batch, opts.datasets_dir, opts.limit_nbatches)

    # (replicas, batch, ...): replica r gets rows r*batch .. (r+1)*batch
    return fit(opts, train_program(opts), train_data,
               lambda a: a.reshape((opts.replicas, opts.batch_size) + a.shape[1:]))

if __name__ == "__main__":
    main()
