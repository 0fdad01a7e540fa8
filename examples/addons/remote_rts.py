"""Tutorial 5, remote variables and replicated tensor sharding (RTS): tutorial 1's network on
2 replicas whose variables live in remote (streaming) memory, each replica keeping half of
every variable. Each step loads the shards, all-gathers them into whole weights, runs forward
and backward, reduce-scatters the gradients (mean over replicas) back into shards, updates
the shards and stores them. With ``--optimizer adam`` the update is Adam's, its state
replica-sharded like the weights and kept in remote buffers too.

Run: ``python -m xlgraph.popxl_compat examples/addons/remote_rts.py``
"""

import numpy as np
import popxl
import popxl.ops as ops
import popxl_addons as addons
from adam_steps import adam_graphs, remote_state, sharded_adam_update
from basic_concepts import Net, fit
from mnist_utils import Batches, load_inputs, parser, session
from popxl_addons import NamedTensors


def train_program(opts):
    ir = popxl.Ir(replication=opts.replicas)
    with ir.main_graph, popxl.in_sequence():
        streams, img_t, labels = load_inputs(opts.batch_size)

        facts, fwd_graph = Net().create_graph(img_t)
        bwd_graph = addons.autodiff(fwd_graph, grads_required=fwd_graph.args.tensors)

        # one remote buffer per variable, each replica holding one shard
        shard_over = {name: opts.replicas for name in facts.keys_flat()}
        buffers = addons.named_variable_buffers(facts, shard_over_dict=shard_over)
        variables = facts.init_remote(buffers, 0)
        load_graph, names = addons.load_remote_graph(buffers)
        store_graph = addons.store_remote_graph(buffers)
        gather_graph, _ = addons.rts.all_gather_replica_sharded_graph(
            NamedTensors.pack(names, load_graph.graph.outputs))

        # load the shards and gather whole weights
        shards = NamedTensors.pack(names, load_graph.call(0))
        weights = NamedTensors.pack(names, gather_graph.bind(shards).call())

        fwd_info = fwd_graph.bind(weights).call_with_info(img_t)
        loss, dx = addons.ops.cross_entropy_with_grad(fwd_info.outputs[0], labels)
        loss_stream = popxl.d2h_stream(loss.shape, loss.dtype, "loss")
        ops.host_store(loss_stream, loss)
        activations = bwd_graph.grad_graph_info.inputs_dict(fwd_info)
        bwd_info = bwd_graph.call_with_info(dx, args=activations)
        grads = bwd_graph.grad_graph_info.fwd_parent_ins_to_grad_parent_outs(fwd_info, bwd_info)
        named_grads = weights.remap(grads)

        # mean over the replicas, each keeping the shard it owns
        reduce_graph, names = addons.rts.reduce_replica_sharded_graph(named_grads, op="mean")
        grad_shards = NamedTensors.pack(names, reduce_graph.bind(named_grads).call())
        if opts.optimizer == "sgd":
            for name in names:
                ops.scaled_add_(shards.get(name), grad_shards.get(name), b=-opts.lr)
        else:  # Adam on the shards: its moments sharded like them, fed the gradient shards
            adam_facts, steps = adam_graphs(shards, grad_shards, opts.lr)
            sharded_adam_update(steps, remote_state(adam_facts), shards, grad_shards)
        store_graph.bind(shards).call(0)
    return session(ir, opts.device), streams, variables, loss_stream


def main(argv=None):
    p = parser("addons tutorial 5: remote variables and RTS", batch_size=4)
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    opts = p.parse_args(argv)
    np.random.seed(42)
    train_data = Batches(True, opts.batch_size * opts.replicas, opts.datasets_dir,
                         opts.limit_nbatches)

    # (replicas, batch, ...): replica r gets rows r*batch .. (r+1)*batch
    return fit(opts, train_program(opts), train_data,
               lambda a: a.reshape((opts.replicas, opts.batch_size) + a.shape[1:]))

if __name__ == "__main__":
    main()
