"""A multi-instance PopXL program, written as for PopXL (``import popxl``, ``popdist``), for
tests/test_poprun.py and docs/poprun.md.

    poprun --num-instances 2 --num-replicas 4 python poprun_train.py OUT
    python -m xlgraph.popxl_compat --device ipu_model poprun_train.py OUT --replicas 4

Data-parallel training of a linear classifier: the weight ``w`` is a variable, the bias ``b``
lives in a remote buffer (loaded and stored each step), a running value ``m`` is sharded over
the 4 replicas in a remote buffer (each replica updates its shard; reading it gathers the
shards from both instances), the gradients from ``autodiff`` are averaged with
``replicated_all_reduce``, every replica keeps its own running loss in a replica-grouped
variable (one group per replica), and every replica gathers all replicas' losses. Each instance
feeds its own replicas' slice of the same global batch and writes what its replicas output to
``OUT.<instance index>.npz``.
"""

from __future__ import annotations

import argparse

import numpy as np
import popdist
import popxl
import popxl.ops as ops

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--replicas", type=int, default=1, help="replicas when not under poprun")
parser.add_argument("--steps", type=int, default=3)
args = parser.parse_args()

if popdist.isPopdistEnvSet():
    ir = popxl.Ir(replication="popdist")
else:
    ir = popxl.Ir(replication=args.replicas)
replicas, local = ir.replication_factor, ir.instance_replication_factor
first = popdist.getReplicaIndexOffset()
batch, features, classes = 3, 5, 4
rng = np.random.default_rng(0)

with ir.main_graph, popxl.in_sequence():
    w = popxl.variable(rng.normal(0, 0.5, (features, classes)).astype(np.float32), name="w")
    buffer = popxl.remote_buffer((classes,), popxl.float32, entries=1)
    b = popxl.remote_variable(np.zeros(classes, np.float32), buffer, 0, name="b")
    moments = popxl.replica_sharded_buffer((6,), popxl.float32)  # 2 of 8 (6 + 2 padding) each
    m = popxl.remote_replica_sharded_variable(np.arange(6, dtype=np.float32), moments, 0,
                                              name="m")
    running = popxl.variable(np.zeros((replicas, 1), np.float32), name="running",
                             replica_grouping=ir.replica_grouping(group_size=1),
                             retrieval_mode="all_replicas")
    s_x = popxl.h2d_stream((batch, features), popxl.float32, "x")
    s_y = popxl.h2d_stream((batch,), popxl.int32, "labels")
    s_loss = popxl.d2h_stream((), popxl.float32, "loss")
    s_all = popxl.d2h_stream((replicas,), popxl.float32, "all_losses")

    def forward(x, w, b):
        return x @ w + b

    fwd = ir.create_graph(forward, s_x.spec, w.spec, popxl.TensorSpec((classes,), popxl.float32))
    bwd = popxl.transforms.autodiff(fwd, grads_required=fwd.inputs[1:])

    x, labels = ops.host_load(s_x), ops.host_load(s_y)
    bias = ops.remote_load(buffer, 0)
    site = ops.call_with_info(fwd, x, w, bias)
    probs = ops.softmax(site.outputs[0], axis=-1)
    loss, d_logits = ops.nll_loss_with_softmax_grad(probs, labels)
    d_w, d_b = ops.call(bwd.graph, d_logits, inputs_dict=bwd.inputs_dict(site))
    ops.scaled_add_(w, ops.collectives.replicated_all_reduce(d_w, "mean"), b=-0.5)
    new_bias = bias - ops.collectives.replicated_all_reduce(d_b, "mean") * 0.5
    ops.remote_store(buffer, 0, new_bias)
    shard = ops.remote_load(moments, 0)
    ops.remote_store(moments, 0, shard * 0.9 + ops.collectives.replicated_all_reduce(loss, "mean"))
    ops.var_updates.accumulate_(running, ops.reshape(loss, (1,)))
    ops.host_store(s_loss, loss)
    ops.host_store(s_all, ops.collectives.replicated_all_gather(loss))

data = np.random.default_rng(1)
x_all = data.normal(size=(args.steps, replicas, batch, features)).astype(np.float32)
y_all = data.integers(0, classes, (args.steps, replicas, batch)).astype(np.int32)
mine = slice(first, first + local)
losses, gathered = [], []
with popxl.Session(ir, "ipu_hw") as session:
    for step in range(args.steps):
        xs, ys = x_all[step, mine], y_all[step, mine]
        if local == 1:  # PopXL leaves out a replica axis of 1
            xs, ys = xs[0], ys[0]
        out = session.run({s_x: xs, s_y: ys})
        losses.append(out[s_loss].reshape(local))
        gathered.append(out[s_all].reshape(local, replicas))
    got = {name: session.get_tensor_data(t) for name, t in (("w", w), ("b", b), ("m", m))}
    got["running"] = np.asarray(session.get_tensor_data(running)).reshape(local, 1)
np.savez(f"{args.out}.{popdist.getInstanceIndex()}.npz", loss=np.stack(losses),
         gathered=np.stack(gathered), first=first, instances=popdist.getNumInstances(), **got)
print(f"instance {popdist.getInstanceIndex()} of {popdist.getNumInstances()}: replicas "
      f"{first}-{first + local - 1} of {replicas}, last losses {np.round(losses[-1], 4).tolist()}")
