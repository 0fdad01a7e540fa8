"""popxl-addons user program in the shape of the library's layer tests: each layer's
``torch_mapping`` loads a torch layer's weights, then the forward output and the input and
weight gradients (``addons.autodiff``) are compared with torch (reference section 18)."""

from functools import partial

import numpy as np
import popxl
import popxl.ops as ops
import popxl_addons as addons
import torch
from checks import check, done, raises
from popxl_addons.layers import Conv2D, Embedding, GroupNorm, LayerNorm, Linear
from popxl_addons.testing_utils import TensorInput, run_module

torch.manual_seed(0)


def compare(name, layer, torch_layer, x, **build):
    ir = popxl.Ir()
    with ir.main_graph:
        facts, graph = layer.create_graph(popxl.TensorSpec(x.shape, popxl.float32), **build)
        grad = addons.autodiff(graph)
        variables = facts.init()
        xt = popxl.variable(x, name="x")
        info = graph.bind(variables).call_with_info(xt)
        (y,) = info.outputs
        dy = popxl.constant(np.ones(y.shape, np.float32))
        grads = grad.call(dy, args=grad.grad_graph_info.inputs_dict(info))
        streams = []
        for t in (y, *grads):
            s = popxl.d2h_stream(t.shape, t.dtype)
            ops.host_store(s, t)
            streams.append(s)
    weights = type(layer).torch_mapping(variables, torch_layer)
    check(f"{name} mapping is a WeightsDict", type(weights).__name__ == "WeightsDict")
    with popxl.Session(ir, "ipu_hw") as s:
        s.write_variables_data(weights)
        got = s.run()
    xin = torch.tensor(x, requires_grad=True)
    want = torch_layer(xin)
    want.sum().backward()
    check(f"{name} forward", np.allclose(got[streams[0]], want.detach().numpy(), atol=1e-5))
    check(f"{name} dx", np.allclose(got[streams[1]], xin.grad.numpy(), atol=1e-5))
    expected = [c.fwd_tensor for c in grad.grad_graph_info.expected_outputs]
    names = {t: k for k, t in graph.args.to_dict().items()}
    params = dict(torch_layer.named_parameters())
    for stream, t in zip(streams[1:], expected):
        if t in names:
            tg = params[names[t]].grad.numpy()
            g = got[stream]
            if names[t] == "weight" and isinstance(layer, Linear):
                tg = tg.T  # popxl-addons' weight is (in, out)
            check(f"{name} d{names[t]}", np.allclose(g.reshape(tg.shape), tg, atol=1e-4))


x2 = np.random.default_rng(1).normal(size=(4, 6)).astype(np.float32)
compare("Linear", Linear(5), torch.nn.Linear(6, 5), x2)
compare("LayerNorm", LayerNorm(), torch.nn.LayerNorm(6, eps=1e-5), x2)
x4 = np.random.default_rng(2).normal(size=(2, 4, 5, 5)).astype(np.float32)
compare("GroupNorm", GroupNorm(2), torch.nn.GroupNorm(2, 4, eps=1e-5), x4)
conv = torch.nn.Conv2d(4, 3, 3, stride=1, padding=1)
compare("Conv2D", Conv2D(3, 3, 1, (1, 1, 1, 1), 1, 1, True), conv, x4)

# the library's tests: run_module with a torch mapping as the weights
torch_linear = torch.nn.Linear(6, 5)
(out,) = run_module(Linear(5), TensorInput(x2),
                    weights=partial(Linear.torch_mapping, nn_layer=torch_linear))
check("14 run_module with weights", np.allclose(
    out, torch_linear(torch.tensor(x2)).detach().numpy(), atol=1e-5))
# 27: Embedding gathers rows (not sharded: no zeroing); vocab padded to a multiple of 16
idx = np.array([[0, 3], [9, 1]], np.int32)
emb = Embedding(popxl.float32, 10, 4)
(rows,) = run_module(emb, TensorInput(idx), weights=lambda v: {
    v.weight: np.arange(16 * 4, dtype=np.float32).reshape(16, 4)})
check("27 padded vocab", emb.vocab_shard_size == 16
      and Embedding.get_vocab_shard_size(40, 2) == 32
      and list(Embedding.get_offsets(40, 2)) == [0, 32])
check("27 gather", np.allclose(rows, np.arange(64, dtype=np.float32).reshape(16, 4)[idx]))

ir = popxl.Ir()
with ir.main_graph:
    raises("18 LayerNorm rank 2 only", ValueError,
           lambda: LayerNorm().create_graph(popxl.TensorSpec((2, 3, 4), popxl.float32)))
done()
