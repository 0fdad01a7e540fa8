"""Two instances whose collectives disagree, for tests/test_dist.py (run by xlgraph-run).

``MODE`` makes instance 1 differ from instance 0: ``shape``, ``dtype`` or ``op`` of its
all-reduce, ``sequence`` (one more run than instance 0), ``late`` (raises after instance 0 has
finished), ``late-hard`` (vanishes after instance 0 has finished), or ``same`` (no difference).
The all-reduce is of 4 elements, or with ``big`` after the mode 1024 (too many to travel with
the header). Each instance prints its results; a failing one prints its error to stderr.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import xlgraph
from xlgraph import ops
from xlgraph.ops.collectives import replicated_all_reduce

mode = sys.argv[1]
if mode == "early" and os.environ.get("PMI_RANK") == "1":
    raise RuntimeError("instance 1 fails before it starts MPI")
ir = xlgraph.Ir(replication="popdist")
odd = ir.instance_index == 1
n = 1024 if sys.argv[2:] == ["big"] else 4
shape = (n - 1,) if mode == "shape" and odd else (n,)
dtype = xlgraph.int32 if mode == "dtype" and odd else xlgraph.float32
op = "mean" if mode == "op" and odd else "add"
with ir.main_graph:
    x = xlgraph.h2d_stream(shape, dtype, "x")
    out = xlgraph.d2h_stream(shape, dtype, "out")
    ops.host_store(out, replicated_all_reduce(ops.host_load(x), op))
data = np.full(shape, 1 + ir.instance_index, dtype.as_numpy())
with xlgraph.Session(ir) as session:
    for _ in range(2 if mode == "sequence" and odd else 1):
        print(f"instance {ir.instance_index}: {session.run({x: data})[out].tolist()}", flush=True)
if odd and mode.startswith("late"):
    time.sleep(0.5)  # instance 0 has finished by now
    if mode == "late-hard":
        os._exit(3)
    raise RuntimeError("instance 1 fails after instance 0 finished")
