"""The benchmark models: the PopXL MNIST tutorial MLP as an xlgraph Ir, and its numpy twin.

``build_mlp`` builds the tutorial program (784-32-10, gelu on both layers, softmax +
``nll_loss_with_softmax_grad``, autodiff of both layer graphs, ``scaled_add_`` SGD, all inside
``in_sequence``). ``NumpyMLP`` is the same step written by hand in plain numpy. Imported by
``mlp.py`` and by ``tests/test_alloc.py``; torch and JAX are imported only inside functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

import xlgraph as popxl
import xlgraph.ops as ops
from xlgraph.transforms import autodiff

HIDDEN = 32
CLASSES = 10
LR = 0.005
_C = math.sqrt(2.0 / math.pi)


class Linear(popxl.Module):
    """``gelu(x @ W + b)``, as in the tutorial."""

    def __init__(self) -> None:
        self.W: popxl.Tensor | None = None
        self.b: popxl.Tensor | None = None

    def build(self, x: popxl.Tensor, out_features: int) -> popxl.Tensor:
        self.W = popxl.graph_input((x.shape[-1], out_features), popxl.float32, "W")
        self.b = popxl.graph_input((out_features,), popxl.float32, "b")
        return ops.gelu(x @ self.W + self.b)


@dataclass
class MLP:
    """A built MNIST program and the handles a benchmark or test needs."""

    ir: popxl.Ir
    images: Any
    labels: Any | None
    out: Any
    variables: list[popxl.Variable]


def initial_params(seed: int = 0) -> list[np.ndarray]:
    """W0, b0, W1, b1 as float32, drawn like the tutorial's ``normal(0, 0.02)``."""
    rng = np.random.default_rng(seed)
    shapes = [(784, HIDDEN), (HIDDEN,), (HIDDEN, CLASSES), (CLASSES,)]
    return [rng.normal(0, 0.02, s).astype(np.float32) for s in shapes]


def _forward(ir: popxl.Ir, x: popxl.Tensor, params: list[popxl.Tensor]) -> tuple[Any, ...]:
    """Both layers as subgraphs called with the parameters: the two modules and call sites."""
    W0, b0, W1, b1 = params
    lin0, lin1 = Linear(), Linear()
    g0 = ir.create_graph(lin0, x, out_features=HIDDEN)
    g1 = ir.create_graph(lin1, g0.outputs[0], out_features=CLASSES)
    ci0 = ops.call_with_info(g0, x, inputs_dict={lin0.W: W0, lin0.b: b0})
    ci1 = ops.call_with_info(g1, ci0.outputs[0], inputs_dict={lin1.W: W1, lin1.b: b1})
    return lin0, ci0, ci1


def _train_ops(ir: popxl.Ir, x: popxl.Tensor, labels: popxl.Tensor,
               params: list[popxl.Tensor]) -> popxl.Tensor:
    """The tutorial's step in the current graph: forward, loss, autodiff, SGD; returns the loss."""
    W0, b0, W1, b1 = params
    lin0, ci0, ci1 = _forward(ir, x, params)
    x1 = ci0.outputs[0]
    probs = ops.softmax(ci1.outputs[0], axis=-1)
    loss, dy = ops.nll_loss_with_softmax_grad(probs, labels)
    bwd1 = autodiff(ci1.called_graph)
    gci1 = ops.call_with_info(bwd1.graph, dy, inputs_dict=bwd1.inputs_dict(ci1))
    grads1 = bwd1.fwd_parent_ins_to_grad_parent_outs(ci1, gci1)
    bwd0 = autodiff(ci0.called_graph, grads_required=[lin0.W, lin0.b])
    gW0, gb0 = ops.call(bwd0.graph, grads1[x1], inputs_dict=bwd0.inputs_dict(ci0))
    for p, g in [(W1, grads1[W1]), (b1, grads1[b1]), (W0, gW0), (b0, gb0)]:
        ops.scaled_add_(p, g, b=-LR)
    return loss


def build_mlp(batch: int, train: bool = True, params: list[np.ndarray] | None = None,
              loop: int = 1) -> MLP:
    """The tutorial's training step (or, with ``train=False``, its forward pass storing logits).

    ``loop > 1`` runs that many training steps per ``Session.run`` (``num_host_transfers``, the
    step in a ``repeat`` body that updates the variables by reference): the inputs then have a
    leading dimension of ``loop``.
    """
    params = initial_params() if params is None else params
    ir = popxl.Ir()
    ir.num_host_transfers = loop
    with ir.main_graph, popxl.in_sequence():
        img_stream = popxl.h2d_stream((batch, 28, 28), popxl.float32, "image")
        label_stream = popxl.h2d_stream((batch,), popxl.int32, "labels") if train else None
        variables = [popxl.variable(p, popxl.float32, n)
                     for p, n in zip(params, ("W0", "b0", "W1", "b1"))]
        loss_stream = popxl.d2h_stream((), popxl.float32, "loss") if train else None
        if not train:
            x = ops.host_load(img_stream).reshape((-1, 784))
            y = _forward(ir, x, variables)[2].outputs[0]
            out_stream = popxl.d2h_stream(y.shape, y.dtype, "logits")
            ops.host_store(out_stream, y)
            return MLP(ir, img_stream, None, out_stream, variables)
    body = ir.main_graph if loop == 1 else ir.create_empty_graph("train_step")
    with body, popxl.in_sequence():
        local = variables if loop == 1 else [popxl.graph_input(v.shape, v.dtype, v.name)
                                             for v in variables]
        x = ops.host_load(img_stream).reshape((-1, 784))
        loss = _train_ops(ir, x, ops.host_load(label_stream), local)
        ops.host_store(loss_stream, loss)
    if loop > 1:
        with ir.main_graph, popxl.in_sequence():
            site = ops.repeat_with_info(body, loop, inputs_dict=dict(zip(local, variables)))
            for v in variables:
                site.set_parent_input_modified(v)
    return MLP(ir, img_stream, label_stream, loss_stream, variables)


def mnist_batches(batch: int, count: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """Synthetic MNIST-shaped batches: normalised float32 images and int32 labels."""
    rng = np.random.default_rng(seed)
    return [(rng.normal(size=(batch, 28, 28)).astype(np.float32),
             rng.integers(0, CLASSES, batch).astype(np.int32)) for _ in range(count)]


# -- the same step by hand --------------------------------------------------------------------
def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(_C * (x + 0.044715 * x * x * x)))


def _gelu_grad(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    x2 = x * x
    t = np.tanh(_C * (x + 0.044715 * x2 * x))
    return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * _C * (1.0 + 3 * 0.044715 * x2))


class NumpyMLP:
    """The tutorial step written directly in numpy: forward, manual backward, SGD in place."""

    def __init__(self, params: list[np.ndarray]) -> None:
        self.W0, self.b0, self.W1, self.b1 = (p.copy() for p in params)

    def forward(self, images: np.ndarray) -> np.ndarray:
        x = images.reshape(-1, 784)
        return _gelu(_gelu(x @ self.W0 + self.b0) @ self.W1 + self.b1)

    def train_step(self, images: np.ndarray, labels: np.ndarray) -> np.ndarray:
        x = images.reshape(-1, 784)
        a0 = x @ self.W0 + self.b0
        h0 = _gelu(a0)
        a1 = h0 @ self.W1 + self.b1
        h1 = _gelu(a1)
        e = np.exp(h1 - h1.max(axis=1, keepdims=True))
        p = e / e.sum(axis=1, keepdims=True)
        rows = np.arange(len(labels))
        loss = -np.log(p[rows, labels]).mean()
        d = p / len(labels)
        d[rows, labels] -= 1.0 / len(labels)
        da1 = _gelu_grad(d, a1)
        da0 = _gelu_grad(da1 @ self.W1.T, a0)
        self.W1 -= LR * (h0.T @ da1)
        self.b1 -= LR * da1.sum(axis=0)
        self.W0 -= LR * (x.T @ da0)
        self.b0 -= LR * da0.sum(axis=0)
        return loss
