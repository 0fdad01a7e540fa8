"""A data-parallel training job for tests/test_dist.py: run as instances by xlgraph-run, or in
one process with ``--replicas N``. Writes the losses and weights each instance sees to
``OUT.<instance>.npz``; ``--fail soft|hard`` makes instance 1 die before its first run."""

from __future__ import annotations

import argparse
import os

import numpy as np

import xlgraph
from xlgraph import dist, ops
from xlgraph.ops.collectives import replicated_all_reduce

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--replicas", type=int, default=1)
parser.add_argument("--fail", choices=["soft", "hard"])
args = parser.parse_args()

ir = xlgraph.Ir(replication="popdist" if dist.isPopdistEnvSet() else args.replicas)
ir.num_host_transfers = 2
rng = np.random.default_rng(0)
batch = 3
with ir.main_graph, xlgraph.in_sequence():
    w0 = xlgraph.variable(rng.normal(0, 0.5, (5, 8)).astype(np.float32), name="w0")
    w1 = xlgraph.variable(rng.normal(0, 0.5, (8, 4)).astype(np.float32), name="w1")
    s_x = xlgraph.h2d_stream((batch, 5), xlgraph.float32, "x")
    s_y = xlgraph.h2d_stream((batch,), xlgraph.int32, "labels")
    s_loss = xlgraph.d2h_stream((), xlgraph.float32, "loss")

    def forward(x, w0, w1):
        return ops.gelu(x @ w0) @ w1

    def step(w0: xlgraph.TensorByRef, w1: xlgraph.TensorByRef):
        x, labels = ops.host_load(s_x), ops.host_load(s_y)
        site = ops.call_with_info(net, x, w0, w1)
        probs = ops.softmax(site.outputs[0], axis=-1)
        loss, d_logits = ops.nll_loss_with_softmax_grad(probs, labels)
        grads = xlgraph.transforms.grad_of_call(site, seeds=[d_logits], wrt=[w0, w1])
        for w in (w0, w1):
            ops.scaled_add_(w, replicated_all_reduce(grads[w], "mean"), b=-0.5)
        ops.host_store(s_loss, replicated_all_reduce(loss, "mean"))

    net = ir.create_graph(forward, s_x.spec, w0.spec, w1.spec)
    ops.repeat(ir.create_graph(step, w0, w1), ir.num_host_transfers, w0, w1)

data_rng = np.random.default_rng(1)
total = ir.replication_factor
x = data_rng.normal(size=(3, 2, total, batch, 5)).astype(np.float32)
y = data_rng.integers(0, 4, (3, 2, total, batch)).astype(np.int32)
mine = slice(ir.replica_offset, ir.replica_offset + ir.instance_replication_factor)
session = xlgraph.Session(ir)
losses = []
with session:
    if args.fail and ir.instance_index == 1:
        if args.fail == "hard":
            os._exit(3)
        raise RuntimeError("instance 1 fails on purpose")
    for i in range(3):
        xi, yi = x[i][:, mine], y[i][:, mine]
        if ir.instance_replication_factor == 1:
            xi, yi = xi[:, 0], yi[:, 0]
        out = session.run({s_x: xi, s_y: yi})[s_loss]
        losses.append(out if out.ndim == 2 else out[:, None])
np.savez(f"{args.out}.{ir.instance_index}.npz", loss=np.concatenate(losses),
         w0=session.get_tensor_data(w0), w1=session.get_tensor_data(w1))
