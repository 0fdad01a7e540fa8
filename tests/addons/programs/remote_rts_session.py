"""popxl-addons user program: remote buffers, replicated tensor sharding and TaskSession
checkpoints on 2 replicas (the remote-variables tutorial's pattern), item by item of the
behaviour reference (sections 10, 11, 13; items 22 and 23)."""

import json
import os
import tempfile
from functools import partial

import numpy as np
import popxl
import popxl.ops as ops
import popxl_addons as addons
from checks import check, done, raises
from popxl_addons import NamedTensors
from popxl_addons.remote import create_remote_buffer, named_variable_buffers
from popxl_addons.rts import (
    all_gather_replica_sharded_graph,
    reduce_replica_sharded_graph,
    replica_sharded_spec,
)


class Lin(addons.Module):
    def build(self, x):
        w = self.add_variable_input("weight", partial(np.full, (x.shape[-1], 4), 0.5, np.float32))
        b = self.add_variable_input("bias", partial(np.zeros, (4,), np.float32))
        return x @ w + b


ir = popxl.Ir(replication=2)
with ir.main_graph, popxl.in_sequence():
    rg = ir.replica_grouping(group_size=2)
    facts, fwd = Lin().create_graph(popxl.TensorSpec((1, 2), popxl.float32))
    # section 10: shard_over_dict forms
    full = named_variable_buffers(facts)  # True: shard over the whole group
    check("10 sharded by default", tuple(full.weight.meta_shape) == (2, 4))
    check("10 shard shape", tuple(full.weight.tensor_shape) == (4,))
    plain = named_variable_buffers(facts, shard_over_dict=False)
    check("10 False unsharded", not plain.weight.meta_shape)
    raises("10 int out of range", ValueError, lambda: named_variable_buffers(facts, 1, 3))
    mixed = named_variable_buffers(facts, shard_over_dict={"bias": 1})
    check("10 mapping", not mixed.bias.meta_shape and tuple(mixed.weight.meta_shape) == (2, 4))
    raises("10 indivisible", ValueError,
           lambda: create_remote_buffer(popxl.TensorSpec((3,), popxl.float32), 1, rg, 2))
    buf = create_remote_buffer(popxl.TensorSpec((4,), popxl.float32), 2, rg)
    check("10 shard_over defaults to the group size", tuple(buf.tensor_shape) == (2,))
    # the tutorial: sharded remote variables, load, gather, forward, reduce-scatter, store
    variables = facts.init_remote(full, 0)
    load, names = addons.load_remote_graph(full)
    check("10 sorted names", names == sorted(names))
    check("10 load_index", load.graph.inputs[0].dtype == popxl.int32)
    store = addons.store_remote_graph(full)
    shards = NamedTensors.pack(names, load.call(0))
    gather, gnames = all_gather_replica_sharded_graph(shards)
    check("11 gather names sorted", gnames == sorted(gnames))
    whole = NamedTensors.pack(gnames, gather.bind(shards).call())
    check("11 whole shape", whole.weight.shape == (2, 4))
    spec = replica_sharded_spec(whole.weight, 2)
    check("11 sharded spec", spec.shape == (4,) and tuple(spec.meta_shape) == (2, 4))
    check("11 indivisible keeps spec", replica_sharded_spec(whole.bias, 3).shape == (4,))
    x = popxl.constant(np.ones((1, 2), np.float32))
    (y,) = fwd.bind(whole).call(x)
    out = popxl.d2h_stream(y.shape, y.dtype, "y")
    ops.host_store(out, y)
    reduce, rnames = reduce_replica_sharded_graph(whole, op="mean")
    reduced = NamedTensors.pack(rnames, reduce.bind(whole).call())
    check("11 reduce gives shards", reduced.weight.shape == (4,))
    for name in rnames:
        ops.scaled_add_(shards.get(name), reduced.get(name), b=-1.0)
    store.bind(shards).call(0)

with popxl.Session(ir, "ipu_hw") as s:
    got = s.run()[out]
    w = s.get_tensor_data(variables.weight)
check("tutorial forward", np.allclose(got, 1.0))
check("tutorial update", w.shape == (2, 4) and np.allclose(w, 0.0))  # 0.5 - mean(0.5)


# section 13: TaskSession checkpoints
def session(seed_value):
    ir = popxl.Ir()
    with ir.main_graph:
        facts, fwd = Lin().create_graph(popxl.TensorSpec((1, 2), popxl.float32))
        variables = facts.init()
        ins = addons.InputStreams(x=((1, 2), popxl.float32))
        outs = addons.OutputStreams(y=((1, 4), popxl.float32))
        (y,) = fwd.bind(variables).call(ops.host_load(ins.x))
        ops.host_store(outs.y, y)
        ops.scaled_add_(variables.bias, popxl.constant(np.ones(4, np.float32)))
    ts = addons.TaskSession(ins, outs, variables, max_checkpoints=2, ir=ir,
                            device_desc="ipu_hw")
    return ts, variables


ts, variables = session(0)
check("23 steps start", ts.session_state["steps"] == 0)
with ts:
    res = ts.run({ts.inputs.x: np.ones((1, 2), np.float32)})
    check("12 iteration yields streams",
          [type(st).__name__ for st in ts.inputs] == ["HostToDeviceStream"])
    check("23 run counts steps", ts.session_state["steps"] == 1)
    ts.add_session_state_info({"epoch": 3})
    with tempfile.TemporaryDirectory() as root:
        for i in range(3):
            ts.save_checkpoint(os.path.join(root, f"c{i}"))
        kept = sorted(os.listdir(root))
        check("22 newest max_checkpoints kept", kept == ["c1", "c2"])
        model = sorted(os.listdir(os.path.join(root, "c2", "model")))
        check("22 model npz by flat name", model == ["bias.npz", "weight.npz"])
        with np.load(os.path.join(root, "c2", "model", "bias.npz")) as z:
            check("22 array stored under the flat name", list(z.keys()) == ["bias"])
            check("22 value", np.allclose(z["bias"], 1.0))
        info = json.load(open(os.path.join(root, "c2", "session_info.json")))
        check("22 session_info", info["steps"] == 1 and info["epoch"] == 3)
        check("13 dataloader unset", ts.dataloader is None)
        raises("13 dataloader needs save/resume", ValueError,
               lambda: setattr(ts, "dataloader", object()))
        fresh, fresh_vars = session(1)
        with fresh:
            fresh.load_checkpoint(os.path.join(root, "c2"))
            check("23 state loaded", fresh.session_state["steps"] == 1)
            data = fresh.get_named_tensors_data()
            check("13 named data", np.allclose(data.bias, 1.0))
            raises("23 report_missing", Exception,
                   lambda: fresh.load_checkpoint(os.path.join(root, "c2"), "bogus"))
done()
