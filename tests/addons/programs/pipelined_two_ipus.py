"""popxl-addons user program in the pipelining tutorial's shape: two layers on two IPUs in
``addons.pipelined_execution`` stages, the first layer's activations stashed and restored
with ``Pipeline.stash_and_restore_activations``, gradients accumulated over 4 micro-batches
by ``autodiff_with_accumulation``; the accumulated gradients equal numpy's mean gradient."""

from functools import partial

import numpy as np
import popxl
import popxl.ops as ops
import popxl_addons as addons
from checks import check, done


class Linear(addons.Module):
    def __init__(self, out_features):
        super().__init__()
        self.out_features = out_features

    def build(self, x):
        w = self.add_variable_input(
            "weight", partial(np.random.default_rng(self.out_features).normal, 0, 0.5,
                              (x.shape[-1], self.out_features)), popxl.float32)
        return x @ w


STEPS, BATCH = 4, 2
rng = np.random.default_rng(0)
images = rng.normal(size=(STEPS, BATCH, 6)).astype(np.float32)
labels = rng.integers(0, 3, (STEPS, BATCH)).astype(np.int32)

ir = popxl.Ir()
with ir.main_graph:
    img_stream = popxl.h2d_stream((BATCH, 6), popxl.float32, "image")
    label_stream = popxl.h2d_stream((BATCH,), popxl.int32, "labels")
    loss_stream = popxl.d2h_stream((), popxl.float32, "loss")
    with popxl.ipu(0):
        fc1_facts, fc1 = Linear(4).create_graph(popxl.TensorSpec((BATCH, 6), popxl.float32))
        fc1_vars = fc1_facts.init("fc1")
        fc1_accum_facts, fc1_bwd = addons.autodiff_with_accumulation(
            fc1, fc1.args.tensors, grads_required=[])
        fc1_accum = fc1_accum_facts.init("fc1")
    with popxl.ipu(1):
        fc2_facts, fc2 = Linear(3).create_graph(popxl.TensorSpec((BATCH, 4), popxl.float32))
        fc2_vars = fc2_facts.init("fc2")
        fc2_accum_facts, fc2_bwd = addons.autodiff_with_accumulation(
            fc2, fc2.args.tensors, grads_required=[fc2.graph.inputs[0]])
        fc2_accum = fc2_accum_facts.init("fc2")

    with addons.pipelined_execution(STEPS) as p:
        with p.stage(0), popxl.ipu(0):
            img = ops.host_load(img_stream, "image")
            fc1_info = fc1.bind(fc1_vars).call_with_info(img)
            x = fc1_info.outputs[0].copy_to_ipu(1)
        with p.stage(1), popxl.ipu(1):
            lab = ops.host_load(label_stream, "labels")
            fc2_info = fc2.bind(fc2_vars).call_with_info(x)
            loss, dlogits = addons.ops.cross_entropy_with_grad(fc2_info.outputs[0], lab)
            ops.host_store(loss_stream, loss)
            (dx,) = fc2_bwd.bind(fc2_accum).call(
                dlogits, args=fc2_bwd.grad_graph_info.inputs_dict(fc2_info))
            dx = dx.copy_to_ipu(0)
        with p.stage(2), popxl.ipu(0):
            activations = p.stash_and_restore_activations(fc1_info, fc1_bwd.grad_graph_info)
            fc1_bwd.bind(fc1_accum).call(dx, args=activations)

ir.num_host_transfers = STEPS
with popxl.Session(ir, "ipu_hw") as s:
    outs = s.run({img_stream: images, label_stream: labels})
    w1, w2 = s.get_tensor_data(fc1_vars.weight), s.get_tensor_data(fc2_vars.weight)
    g1 = s.get_tensor_data(fc1_accum.accum.weight)
    g2 = s.get_tensor_data(fc2_accum.accum.weight)

losses, grads1, grads2 = [], [], []
for i in range(STEPS):
    h = images[i] @ w1
    z = h @ w2
    p_ = np.exp(z - z.max(1, keepdims=True))
    p_ /= p_.sum(1, keepdims=True)
    losses.append(-np.log(p_[np.arange(BATCH), labels[i]]).mean())
    dz = (p_ - np.eye(3)[labels[i]]) / BATCH
    grads2.append(h.T @ dz)
    grads1.append(images[i].T @ (dz @ w2.T))
check("pipelined losses", np.allclose(outs[loss_stream], losses, atol=1e-5))
check("fc2 mean gradient", np.allclose(g2, np.mean(grads2, axis=0), atol=1e-5))
check("fc1 mean gradient (stashed activations)", np.allclose(g1, np.mean(grads1, axis=0),
                                                             atol=1e-5))
done()
