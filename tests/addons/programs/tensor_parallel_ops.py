"""popxl-addons user program on 4 replicas with the custom ops imported from their nested
module paths (``popxl_addons.ops.<op>.<op>``): strided groups (item 28), the identity /
all-reduce pair (item 29) and the sharded cross-entropy (item 30), checked against numpy."""

import numpy as np
import popxl
import popxl.ops as ops
import popxl_addons as addons
from checks import check, done
from popxl_addons.ops.cross_entropy_sharded_loss.cross_entropy_sharded_loss import (
    cross_entropy_sharded_loss,
)
from popxl_addons.ops.replicated_all_reduce_TP.replicated_all_reduce_TP import (
    replicated_all_reduce_identical_grad_inputs,
    replicated_all_reduce_identical_inputs,
)
from popxl_addons.ops.replicated_strided_collectives.replicated_strided_collectives import (
    replicated_all_gather_strided,
    replicated_all_reduce_strided,
)
from popxl_addons.ops.rotary_pos_embed.rotary_pos_embed import trig_tables
from popxl_addons.patterns import apply_pre_alias_patterns

R = 4
rng = np.random.default_rng(0)
data = rng.normal(size=(R, 3)).astype(np.float32)
logits = rng.normal(size=(R, 2, 5)).astype(np.float32)  # 2 TP groups of 2: 10 classes each
labels = np.array([7, 2], np.int32)

ir = popxl.Ir(replication=R)
with ir.main_graph:
    rg = ir.replica_grouping(stride=2, group_size=2)  # {0, 2}, {1, 3}
    xs = popxl.h2d_stream((3,), popxl.float32, "x")
    ls = popxl.h2d_stream((2, 5), popxl.float32, "logits")
    ids = popxl.h2d_stream((2,), popxl.int32, "labels")

    def block(x):
        y = replicated_all_reduce_identical_inputs(x, group=rg)
        return replicated_all_reduce_identical_grad_inputs(y * 2.0, group=rg)

    graph = ir.create_graph(block, popxl.TensorSpec((3,), popxl.float32))
    grad = addons.autodiff(graph)
    x = ops.host_load(xs)
    info = ops.call_with_info(graph, x)
    (dx,) = ops.call(grad.graph, popxl.constant(np.ones(3, np.float32)),
                     inputs_dict=grad.grad_graph_info.inputs_dict(info))
    summed = replicated_all_reduce_strided(x, group=rg)
    gathered = replicated_all_gather_strided(x, group=rg)
    lg = ops.host_load(ls)
    lab = ops.host_load(ids)
    loss = cross_entropy_sharded_loss(lg, lab, replica_grouping=rg, reduction="none")
    apply_pre_alias_patterns(ir)
    outs = {}
    for name, t in dict(y=info.outputs[0], dx=dx, summed=summed, gathered=gathered,
                        loss=loss).items():
        outs[name] = popxl.d2h_stream(t.shape, t.dtype, name)
        ops.host_store(outs[name], t)

members = [[0, 2], [1, 3], [0, 2], [1, 3]]
ranks = [0, 0, 1, 1]
shifted = np.stack([labels - 5 * ranks[r] for r in range(R)]).astype(np.int32)
with popxl.Session(ir, "ipu_hw") as s:
    got = s.run({xs: data, ls: logits, ids: shifted})
for r in range(R):
    group_sum = data[members[r]].sum(axis=0)
    check(f"28/29 forward r{r}", np.allclose(got[outs["y"]][r], 2 * group_sum))
    check(f"29 backward sums r{r}", np.allclose(got[outs["dx"]][r], 2 * 2.0))
    check(f"28 strided sum r{r}", np.allclose(got[outs["summed"]][r], group_sum))
    check(f"28 gather by rank r{r}",
          np.allclose(got[outs["gathered"]][r], data[members[r]].ravel()))
    whole = np.concatenate([logits[m] for m in members[r]], axis=1)  # (2, 10)
    ref = -(whole[np.arange(2), labels] - np.log(np.exp(whole).sum(axis=1)))
    check(f"30 same loss on every member r{r}", np.allclose(got[outs["loss"]][r], ref,
                                                            atol=1e-5))
sin, cos = trig_tables(4, 4)
check("19.10 (sin, cos) order", np.allclose(sin[1, 0], np.sin(1.0)))
done()
