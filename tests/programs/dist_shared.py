"""Data-parallel SGD as users write it, for tests/test_dist_shared.py: run as instances by
xlgraph-run (``Ir(replication="popdist")``), or in one process with ``--replicas N``.

Each replica computes gradients of its own batch, ``replicated_all_reduce`` averages them over
every replica (one weight's gradient large enough to travel in a bucket of its own, one small
enough to travel with a header), and ``scaled_add_`` applies them; then a device loop adds an
all-reduced sum to ``total`` 3 times; ``STEPS`` runs, each on new data, so that the buckets'
two shared buffers are each used more than once. Writes every
run's loss and the final weights to ``OUT.<instance>.npz``, and whether the job's buckets
travelled through shared memory (``shared``).
"""

from __future__ import annotations

import argparse

import numpy as np

import xlgraph
from xlgraph import dist, ops
from xlgraph.ops.collectives import replicated_all_reduce

STEPS = 5
parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--replicas", type=int, default=1)
args = parser.parse_args()

ir = xlgraph.Ir(replication="popdist" if dist.isPopdistEnvSet() else args.replicas)
with ir.main_graph, xlgraph.in_sequence():
    s_x = xlgraph.h2d_stream((64, 96), xlgraph.float32, "x")
    w = xlgraph.variable(np.full((64, 96), 0.5, np.float32), name="w")
    b = xlgraph.variable(np.zeros(8, np.float32), name="b")
    total = xlgraph.variable(np.ones((64, 96), np.float32), name="total")
    x = ops.host_load(s_x)
    y = ops.tanh(x * w) + ops.reshape(ops.concat([b] * 12, 0), (96,))
    err = y - x
    loss = replicated_all_reduce(ops.mean(err * err), "mean")
    grad_w = replicated_all_reduce(err * x, "mean")  # 24 KiB: a bucket of shared rows
    grad_b = replicated_all_reduce(ops.mean(ops.reshape(err, (64, 12, 8)), [0, 1]), "mean")
    ops.scaled_add_(w, grad_w, b=-0.05)
    ops.scaled_add_(b, grad_b, b=-0.1)

    def accumulate(t: xlgraph.TensorByRef, x: xlgraph.Tensor) -> None:
        ops.var_updates.accumulate_(t, replicated_all_reduce(ops.sin(x * t), "add"))

    # a bucket in a loop body: its buffers alternate within one run as well
    ops.repeat(ir.create_graph(accumulate, total, x), 3, total, x)
    s_loss = xlgraph.d2h_stream((), xlgraph.float32, "loss")
    ops.host_store(s_loss, loss)

R = ir.replication_factor
mine = slice(ir.replica_offset, ir.replica_offset + ir.instance_replication_factor)
rng = np.random.default_rng(0)
losses = []
with xlgraph.Session(ir) as session:
    for _ in range(STEPS):
        x = rng.normal(size=(R, 64, 96)).astype(np.float32)[mine]
        out = session.run({s_x: x[0] if ir.instance_replication_factor == 1 else x})[s_loss]
        losses.append(np.asarray(out).reshape(-1)[0])
    weights = {v.name: session.get_tensor_data(v) for v in (w, b, total)}
shared = False
if dist.isPopdistEnvSet():
    from xlgraph.dist import exchange

    shared = exchange._JOB is not None and exchange._JOB._share
np.savez(f"{args.out}.{ir.instance_index}.npz", loss=np.array(losses), shared=shared, **weights)
