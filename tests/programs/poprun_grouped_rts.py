"""A multi-instance PopXL program, written as for PopXL (``import popxl``, ``popdist``), for
tests/test_poprun_grouped.py: grouped, replica-sharded remote variables.

    poprun --num-instances I --num-replicas 8 python poprun_grouped_rts.py OUT
    python -m xlgraph.popxl_compat --device ipu_model poprun_grouped_rts.py OUT --replicas 8

For each (stride, group size, shard_over) of ``CONFIGS``: a variable with one value per group,
each group's value split over ``shard_over`` of its replicas, loaded, gathered over the shard
group (``output_shape`` "auto": the group's value), and stored back as ``2 * shard + 1`` each
run. Each instance writes its replicas' gathers of two runs and ``get_tensor_data`` of every
variable to ``OUT.<instance index>.npz``.
"""

from __future__ import annotations

import argparse

import numpy as np
import popdist
import popxl
import popxl.ops as ops

CONFIGS = [(1, 4, 4), (2, 4, 4), (2, 4, 2), (4, 2, 2), (1, 8, 8), (1, 8, 4), (2, 2, 1)]

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--replicas", type=int, default=8, help="replicas when not under poprun")
args = parser.parse_args()

if popdist.isPopdistEnvSet():
    ir = popxl.Ir(replication="popdist")
else:
    ir = popxl.Ir(replication=args.replicas)
opts = ir._pb_ir.getSessionOptions()
first, local = opts.globalReplicaOffset, ir.instance_replication_factor
rng = np.random.default_rng(0)
variables, streams, initial = {}, {}, {}
with ir.main_graph, popxl.in_sequence():
    for k, (stride, size, shard_over) in enumerate(CONFIGS):
        rg = ir.replica_grouping(stride, size)
        shape = (rg.num_groups, 3, 5) if rg.num_groups > 1 else (3, 5)
        data = initial[f"d{k}"] = rng.normal(size=shape).astype(np.float32)
        buffer = popxl.replica_sharded_buffer(shape, popxl.float32, rg, shard_over)
        variables[f"v{k}"] = popxl.remote_replica_sharded_variable(
            data, buffer, 0, replica_grouping=rg, name=f"v{k}")
        shard = ops.remote_load(buffer, 0)
        whole = ops.collectives.replicated_all_gather(
            shard, group=ir.replica_grouping(rg.stride, shard_over))
        streams[f"g{k}"] = popxl.d2h_stream(whole.shape, whole.dtype, f"g{k}")
        ops.host_store(streams[f"g{k}"], whole)
        ops.remote_store(buffer, 0, shard * 2.0 + 1.0)

with popxl.Session(ir, "ipu_hw") as session:
    runs = [session.run() for _ in range(2)]
    got = {name: session.get_tensor_data(v) for name, v in variables.items()}
gathers = {name: np.stack([out[s].reshape(local, 3, 5) for out in runs])
           for name, s in streams.items()}
np.savez(f"{args.out}.{popdist.getInstanceIndex()}.npz", first=first, local=local, configs=CONFIGS,
         **gathers, **got, **initial)
print(f"instance {popdist.getInstanceIndex()} of {popdist.getNumInstances()}: replicas "
      f"{first}-{first + local - 1} of {ir.replication_factor}")
