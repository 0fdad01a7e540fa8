"""All-reduces of every kind between instances, bucketed and not, for tests/test_dist_buckets.py:
run as instances by xlgraph-run, or in one process with ``--replicas N``.

One program (sums, means, extrema and products; float32, float16 and int32; signed zeros,
infinities and NaNs; a grouped all-reduce, an in-place one, one inside a device loop, and
values large enough to travel apart from their header), run by three Sessions: unbucketed
(``XLGRAPH_BUCKET_MB=0``), in buckets of at most 2 KiB, and by the interpreter. Writes each
Session's outputs, and how many buckets its step starts, to ``OUT.<instance>.npz``.
"""

from __future__ import annotations

import argparse
import os
import re

import numpy as np

import xlgraph
from xlgraph import dist, ops
from xlgraph.lower.buckets import BUCKET_MB
from xlgraph.ops.collectives import replicated_all_reduce, replicated_all_reduce_

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--replicas", type=int, default=1)
args = parser.parse_args()

ir = xlgraph.Ir(replication="popdist" if dist.isPopdistEnvSet() else args.replicas)
pairs = ir.replica_grouping(stride=1, group_size=2)
with ir.main_graph, xlgraph.in_sequence():
    s_x = xlgraph.h2d_stream((6, 5), xlgraph.float32, "x")
    s_big = xlgraph.h2d_stream((64, 96), xlgraph.float32, "big")
    total = xlgraph.variable(np.zeros((6, 5), np.float32), name="total")
    x, big = ops.host_load(s_x), ops.host_load(s_big)
    zeros = x * 0.0  # -0.0 where x < 0
    results = {
        "add": replicated_all_reduce(ops.gelu(x), "add"),
        "mean": replicated_all_reduce(ops.tanh(x), "mean"),
        "max": replicated_all_reduce(x * x, "max"),
        "min": replicated_all_reduce(ops.exp(x), "min"),
        "mul": replicated_all_reduce(x + 2.0, "mul"),
        "zeros": replicated_all_reduce(zeros, "add"),
        "special": replicated_all_reduce(ops.log(x), "add"),  # NaN below 0, -inf at 0
        "half": replicated_all_reduce(ops.cast(x, xlgraph.float16), "add"),
        "int": replicated_all_reduce(ops.cast(x * 100.0, xlgraph.int32), "add"),
        "grouped": replicated_all_reduce(x - 1.0, "add", group=pairs),
        "big": replicated_all_reduce(ops.sin(big), "mean"),
        "big2": replicated_all_reduce(big * big, "add"),
    }
    inplace = x * 1.5
    replicated_all_reduce_(inplace, "add")
    results["inplace"] = inplace

    def accumulate(t: xlgraph.TensorByRef, x: xlgraph.Tensor) -> None:
        ops.var_updates.accumulate_(t, replicated_all_reduce(ops.sqrt(x * x + 1.0), "add"))

    ops.repeat(ir.create_graph(accumulate, total, x), 3, total, x)
    streams = {name: xlgraph.d2h_stream(t.shape, t.dtype, name) for name, t in results.items()}
    for name, t in results.items():
        ops.host_store(streams[name], t)

rng = np.random.default_rng(0)
R = ir.replication_factor
x = rng.normal(size=(R, 6, 5)).astype(np.float32)
x[:, 0, 0] = 0.0
x[:, 1, 1] = -1e-30  # -0.0 after x * 0.0
x[1, 2, 2] = np.inf
big = rng.normal(size=(R, 64, 96)).astype(np.float32)
mine = slice(ir.replica_offset, ir.replica_offset + ir.instance_replication_factor)
feed = {s_x: x[mine], s_big: big[mine]}
if ir.instance_replication_factor == 1:
    feed = {s: v[0] for s, v in feed.items()}
saved = {}
for setting in ("0", "0.002", "interpreter"):
    os.environ[BUCKET_MB] = "0" if setting == "interpreter" else setting
    session = xlgraph.Session(ir, optimize=setting != "interpreter")
    with session:
        out = session.run(feed)
        for name, stream in streams.items():
            saved[f"{setting}/{name}"] = out[stream]
        saved[f"{setting}/total"] = session.get_tensor_data(total)
    source = getattr(session, "source", "") if setting != "interpreter" else ""
    saved[f"{setting}/buckets"] = np.array(len(re.findall(r"k_all_reduce_bucket\d*\(", source)))
np.savez(f"{args.out}.{ir.instance_index}.npz", **saved)
