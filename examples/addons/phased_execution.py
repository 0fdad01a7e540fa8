"""Tutorial 6, phased execution with batch serialisation: tutorial 1's network in two phases
whose weights live in remote memory and are loaded only for their phase. Each phase runs its
layers over ``--steps`` micro-batches in a row (batch serialisation); activations and the
gradient between the phases go through remote buffers, one entry per micro-batch. With
``--replicas 2`` each replica trains on its own micro-batches and the gradients are averaged
over the replicas; ``--rts`` also shards every weight over the replica group its factory
gives (Graphcore's tutorial 6 shape), with the same results.

Run: ``python -m xlgraph.popxl_compat examples/addons/phased_execution.py``
"""

import numpy as np
import popxl
import popxl.ops as ops
import popxl_addons as addons
from basic_concepts import Linear, fit
from mnist_utils import Batches, parser, session
from popxl_addons import NamedTensors
from popxl_addons.transforms import RemoteHandle, batch_serial_buffer, batch_serialise_fwd_and_grad


class Layers(addons.Module):
    """fc1..fc3 with GELU: phase 0."""

    def __init__(self):
        super().__init__()
        self.fc1 = Linear(512)
        self.fc2 = Linear(512)
        self.fc3 = Linear(512)

    def build(self, x):
        x = x.reshape((-1, 28 * 28))
        return ops.gelu(self.fc3(ops.gelu(self.fc2(ops.gelu(self.fc1(x))))))


class Head(addons.Module):
    """fc4 and the loss: phase 1."""

    def __init__(self):
        super().__init__()
        self.fc4 = Linear(10)

    def build(self, x, labels):
        return addons.ops.cross_entropy(self.fc4(x), labels)


class Phase:
    """One phase's module: remote variables, their load/store graphs, accumulators. With
    ``rts`` each replica keeps only its shard of every variable: over the replica group its
    factory gives (all replicas by default, as popxl-addons always gives one)."""

    def __init__(self, module, *specs, input_grads=0, rts=False):
        self.facts, self.fwd = module.create_graph(*specs)
        # gradients: accumulated for the weights, returned for the first `input_grads` inputs
        self.accum_facts, self.bwd = addons.autodiff_with_accumulation(
            self.fwd, self.fwd.args.tensors, grads_required=self.fwd.graph.inputs[:input_grads])
        self.rts = rts
        self.groups = {name: f.replica_grouping for name, f in self.facts.to_dict().items()}

    def init(self):
        """The remote variables, their load/store graphs and the accumulators."""
        shard_over = {name: g.group_size if self.rts else 1 for name, g in self.groups.items()}
        buffers = addons.named_variable_buffers(self.facts, shard_over_dict=shard_over)
        self.variables = self.facts.init_remote(buffers)
        self.load, self.names = addons.load_remote_graph(buffers)
        self.store = addons.store_remote_graph(buffers)
        self.accum = self.accum_facts.init()

    def load_weights(self):
        """``(what this replica stores, the whole weights)``."""
        stored = NamedTensors.pack(self.names, self.load.call(0))
        if not self.rts:
            return stored, stored
        gather, names = addons.rts.all_gather_replica_sharded_graph(
            stored, replica_groups=self.groups)
        return stored, NamedTensors.pack(names, gather.bind(stored).call())

    def sgd_and_store(self, stored, lr):
        """The mean gradient over the replicas (reduce-scattered to this replica's shard
        with RTS, all-reduced otherwise), an SGD step, the weights stored back."""
        grads = self.accum.accum
        if self.rts:
            reduce, names = addons.rts.reduce_replica_sharded_graph(
                grads, op="mean", shard_groups=self.groups)
            grads = NamedTensors.pack(names, reduce.bind(grads).call())
        elif popxl.gir().replication_factor > 1:
            for name in self.names:
                ops.collectives.replicated_all_reduce_(grads.get(name), op="mean")
        for name in self.names:
            ops.scaled_add_(stored.get(name), grads.get(name), b=-lr)
        ops.var_updates.accumulator_scale_(self.accum.mean_accum_counter, 0.0)
        self.store.bind(stored).call(0)


def train_program(opts):
    ir = popxl.Ir(replication=opts.replicas)
    ir._pb_ir.getSessionOptions().numIOTiles = 32  # batch serialisation transfers on IO tiles
    steps = opts.steps
    with ir.main_graph, popxl.in_sequence():
        img_stream = popxl.h2d_stream((opts.batch_size, 28, 28), popxl.float32, "image")
        label_stream = popxl.h2d_stream((opts.batch_size,), popxl.int32, "labels")
        loss_stream = popxl.d2h_stream((), popxl.float32, "loss")
        layers = Phase(Layers(), popxl.TensorSpec(img_stream.shape, popxl.float32),
                       rts=opts.rts)
        x_spec = popxl.TensorSpec((opts.batch_size, 512), popxl.float32)
        head = Phase(Head(), x_spec, popxl.TensorSpec(label_stream.shape, popxl.int32),
                     input_grads=1, rts=opts.rts)
        head_x, head_labels = head.fwd.graph.inputs[:2]
        layers.init()  # once both graphs exist (each factory probed its initialiser once)
        head.init()

        x_buffer = RemoteHandle(batch_serial_buffer(x_spec, steps))
        # the loss gradient (1.0) each backward step of phase 1 starts from
        one_buffer = batch_serial_buffer(popxl.TensorSpec((), popxl.float32), steps)
        for i in range(steps):
            popxl.remote_variable(np.float32(1.0), one_buffer, i)
        dx_buffer = RemoteHandle(batch_serial_buffer(x_spec, steps))

        # phase 0 forward: images in, activations to x_buffer
        fwd0, bwd0 = batch_serialise_fwd_and_grad(
            layers.fwd, layers.bwd, layers.fwd.args, steps,
            load_handles={layers.fwd.graph.inputs[0]: img_stream,
                          layers.bwd.graph.inputs[0]: dx_buffer},
            store_streams={}, store_buffers={layers.fwd.graph.outputs[0]: x_buffer})
        # phase 1 forward and backward: x_buffer in, loss out, input gradient to dx_buffer
        fwd1, bwd1 = batch_serialise_fwd_and_grad(
            head.fwd, head.bwd, head.fwd.args, steps,
            load_handles={head_x: x_buffer, head_labels: label_stream,
                          head.bwd.graph.inputs[0]: (one_buffer, 0)},
            store_streams={head.fwd.graph.outputs[0]: loss_stream},
            store_buffers={head.bwd.graph.outputs[0]: dx_buffer})

        stored0, weights0 = layers.load_weights()
        fwd0.graph.bind(weights0).call(0)
        stored1, weights1 = head.load_weights()
        fwd1.graph.bind(weights1).call(0)
        bwd1.graph.bind(NamedTensors.from_dict({**weights1.to_dict(),
                                                **head.accum.to_dict()})).call(0)
        head.sgd_and_store(stored1, opts.lr)
        bwd0.graph.bind(NamedTensors.from_dict({**weights0.to_dict(),
                                                **layers.accum.to_dict()})).call(0)
        layers.sgd_and_store(stored0, opts.lr)
    ir.num_host_transfers = steps
    variables = NamedTensors.from_dict({**layers.variables.to_dict(),
                                        **head.variables.to_dict()})
    return session(ir, opts.device), [img_stream, label_stream], variables, loss_stream


def main(argv=None):
    p = parser("addons tutorial 6: phased execution with batch serialisation", lr=0.05)
    p.add_argument("--steps", type=int, default=4, help="micro-batches per phase")
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument("--rts", action="store_true",
                   help="each replica keeps a shard of every weight (replicated tensor sharding)")
    opts = p.parse_args(argv)
    np.random.seed(42)
    train_data = Batches(True, opts.batch_size * opts.replicas, opts.datasets_dir,
                         opts.limit_nbatches, group=opts.steps)
    # each run takes (micro-batches, batch, ...) arrays, (micro-batches, replicas, batch, ...)
    # with replicas
    split = None if opts.replicas == 1 else (
        lambda a: a.reshape((opts.steps, opts.replicas, opts.batch_size) + a.shape[2:]))
    return fit(opts, train_program(opts), train_data, split)

if __name__ == "__main__":
    main()
