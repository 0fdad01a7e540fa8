"""popxl-addons user program: GraphCache and ``function``, BoundGraph argument overrides,
streams and seeds, the composite cross-entropy against numpy, recomputation, FLOP counting and
the ILD groupings (reference sections 7, 9, 12, 15, 19.1; items 21, 26)."""

import os
from functools import partial

import numpy as np
import popxl
import popxl.ops as ops
import popxl_addons as addons
from checks import check, done, raises
from popxl_addons.named_replica_grouping import get_ild_replica_grouping


class Lin(addons.Module):
    def build(self, x):
        w = self.add_variable_input("w", partial(np.full, (x.shape[-1], 3), 0.5, np.float32))
        return x @ w


ir = popxl.Ir()
with ir.main_graph, popxl.in_sequence():
    spec = popxl.TensorSpec((2, 4), popxl.float32)
    cache = addons.GraphCache()

    def double(t):
        return t * 2.0

    g1 = cache.create_graph(double, spec)
    check("7 cache hit same spec", cache.create_graph(double, spec) is g1)
    check("7 cache miss other shape",
          cache.create_graph(double, popxl.TensorSpec((3, 4), popxl.float32)) is not g1)
    outlined = addons.function(double)
    outlined(popxl.constant(np.ones(2, np.float32)))
    n_graphs = len(ir._pb_ir.getAllGraphs())
    outlined(popxl.constant(np.ones(2, np.float32)))
    check("7 function outlines once", len(ir._pb_ir.getAllGraphs()) == n_graphs)
    facts, fwd = Lin().create_graph(spec)
    v1, v2 = facts.init(), facts.init()
    bound = fwd.bind(v1)
    x = popxl.constant(np.ones((2, 4), np.float32))
    ops.var_updates.accumulate_(v2.w, popxl.constant(np.ones((4, 3), np.float32)))  # 1.5
    (y_bound,) = bound.call(x)
    (y_over,) = bound.call(x, args={fwd.args.w: v2.w})  # call args override bound ones
    copy = fwd.copy()
    check("7 copy keeps graph",
          copy.graph is fwd.graph and copy.args.to_dict() == fwd.args.to_dict())
    check("7 print_schedule text", isinstance(fwd.print_schedule(), str))

    # 12 streams and seeds
    data, stream, t = addons.host_load(np.ones((2,), np.float32), popxl.float32, "inp")
    check("12 host_load stream name", stream.tensor_id.endswith("inp_stream")
          if hasattr(stream, "tensor_id") else "inp_stream" in str(stream))
    out_stream = addons.host_store(t * 2.0)
    seed, seed_t = addons.seed_variable(5)
    check("12 seed (2,) uint32", seed.shape == (2,) and seed.dtype == popxl.uint32)
    check("12 print_tensor off returns t", addons.print_tensor(t) is t)
    streams = addons.InputStreams.from_streams([stream])
    check("12 from_streams", len(streams) == 1)

    # 19.1 cross entropy with an ignored label, against numpy
    logits = np.random.default_rng(0).normal(size=(3, 5)).astype(np.float32)
    labels = np.array([1, -100, 4], np.int32)
    lt = popxl.constant(logits)
    lab = popxl.constant(labels)
    loss = addons.cross_entropy(lt, lab, ignore_index=-100)
    loss2, dx = addons.cross_entropy_with_grad(lt, lab, loss_scaling=4, ignore_index=-100)
    outs = {}
    for name, tt in dict(y_bound=y_bound, y_over=y_over, loss=loss, loss2=loss2, dx=dx).items():
        outs[name] = popxl.d2h_stream(tt.shape, tt.dtype, name)
        ops.host_store(outs[name], tt)

with popxl.Session(ir, "ipu_hw") as s:
    got = s.run({stream: data})
check("7 bound", np.allclose(got[outs["y_bound"]], 2.0))
check("7 args override", np.allclose(got[outs["y_over"]], 6.0))
check("12 host_store", np.allclose(got[out_stream], 2.0))
p = np.exp(logits - logits.max(1, keepdims=True))
p /= p.sum(1, keepdims=True)
keep = labels != -100
nll = -np.log(p[np.arange(3), np.where(keep, labels, 0)])
check("19.1 mean over kept", np.isclose(got[outs["loss"]], nll[keep].mean(), atol=1e-6))
check("19.1 loss not scaled", np.isclose(got[outs["loss2"]], nll[keep].mean(), atol=1e-6))
onehot = np.eye(5)[np.where(keep, labels, 0)]
want_dx = 4 * (p - onehot) * keep[:, None] / keep.sum()
check("19.1 dx scaled and normalised", np.allclose(got[outs["dx"]], want_dx, atol=1e-6))

# 15 recompute_graph: the same gradients
ir = popxl.Ir()
with ir.main_graph:
    facts, fwd = Lin().create_graph(spec)
    bwd = addons.autodiff(fwd)
    rec = addons.recompute_graph(bwd)
    variables = facts.init()
    x = popxl.constant(np.arange(8, dtype=np.float32).reshape(2, 4))
    results = []
    for g in (bwd, rec):
        info = fwd.bind(variables).call_with_info(x)
        dy = popxl.constant(np.ones((2, 3), np.float32))
        results.append(g.call(dy, args=g.grad_graph_info.inputs_dict(info)))
    st = [popxl.d2h_stream(r[-1].shape, r[-1].dtype) for r in results]
    for s_, r in zip(st, results):
        ops.host_store(s_, r[-1])
    flops = addons.total_FLOPs(ir)
with popxl.Session(ir, "ipu_hw") as s:
    got = s.run()
check("15 recompute same grads", np.allclose(got[st[0]], got[st[1]]))
check("26 FLOPs count the matmuls", flops >= 3 * 2 * 4 * 2 * 3)

# 9 ILD groupings
os.environ["POPLAR_TARGET_OPTIONS"] = '{"ipuLinkDomainSize": "4"}'
ir = popxl.Ir(replication=16)
with ir.main_graph:
    rg = get_ild_replica_grouping(ir.replica_grouping(stride=1, group_size=8))
    check("9 ILD caps the group", rg.group_size == 4 and rg.stride == 1)
    rg = get_ild_replica_grouping(ir.replica_grouping(stride=2, group_size=4))
    check("9 same stride, ild // stride members", rg.group_size == 2 and rg.stride == 2)
    small = ir.replica_grouping(stride=1, group_size=2)
    check("9 within the ILD unchanged", get_ild_replica_grouping(small) is small)
    raises("9 stride beyond the ILD", ValueError,
           lambda: get_ild_replica_grouping(ir.replica_grouping(stride=8, group_size=2)))
done()
