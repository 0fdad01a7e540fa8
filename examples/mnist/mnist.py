"""The PopXL MNIST tutorial, ported to xlgraph: a two-layer network trained with explicit autodiff.

Run ``python examples/mnist/mnist.py`` (see ``--help``). The only change from the PopXL program
is ``import xlgraph as popxl``; data comes from ``xlgraph.datasets`` (offline) or torchvision.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tqdm import tqdm

import xlgraph as popxl
import xlgraph.ops as ops
from xlgraph.data import DataLoader
from xlgraph.datasets import MNIST_MEAN, MNIST_STD, load_mnist, normalize
from xlgraph.transforms import autodiff


@dataclass
class Timer:
    """Context manager and decorator that prints how long its block took."""

    desc: str
    start: float = field(default=0.0, init=False)

    def __enter__(self) -> Timer:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        print(f"Timer '{self.desc}' took {time.perf_counter() - self.start:.3f} seconds")

    def __call__(self, fn: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            with Timer(self.desc):
                return fn(*args, **kwargs)

        return timed


def _torchvision_split(datasets_dir: str, train: bool) -> tuple[np.ndarray, np.ndarray]:
    import torchvision  # optional: only with --data-source torchvision

    root = datasets_dir or os.path.expanduser("~/.torch/datasets")
    ds = torchvision.datasets.MNIST(root, train=train, download=True)
    return ds.data.numpy(), ds.targets.numpy()


@Timer("get_mnist_data")
def get_mnist_data(opts: argparse.Namespace) -> tuple[DataLoader, DataLoader]:
    """Training and test loaders of normalised MNIST (shuffled, incomplete batches dropped)."""
    loaders = []
    for train, batch in ((True, opts.batch_size), (False, opts.test_batch_size)):
        if opts.data_source == "torchvision":
            images, labels = _torchvision_split(opts.datasets_dir, train)
        else:
            images, labels = load_mnist(opts.datasets_dir, train=train)
        if opts.limit_nbatches:
            keep = (opts.batch_size + opts.test_batch_size) * opts.limit_nbatches
            images, labels = images[:keep], labels[:keep]
        x = normalize(images, MNIST_MEAN, MNIST_STD)
        loaders.append(DataLoader(x, labels.astype(np.int32), batch_size=batch, shuffle=True,
                                  seed=opts.seed + int(train), drop_last=True))
    return loaders[0], loaders[1]


def limited(loader: DataLoader, limit: int | None) -> Iterator[tuple[np.ndarray, ...]]:
    for i, batch in enumerate(loader):
        if limit is not None and i >= limit:
            return
        yield batch


class Linear(popxl.Module):
    """``gelu(x @ W + b)``; W and b are inputs of the graph, bound at each call site."""

    def __init__(self) -> None:
        self.W: popxl.Tensor | None = None
        self.b: popxl.Tensor | None = None

    def build(self, x: popxl.Tensor, out_features: int, bias: bool = True) -> popxl.Tensor:
        self.W = popxl.graph_input((x.shape[-1], out_features), popxl.float32, "W")
        y = x @ self.W
        if bias:
            self.b = popxl.graph_input((out_features,), popxl.float32, "b")
            y = y + self.b
        return ops.gelu(y)


def create_network_graph(ir: popxl.Ir, x: popxl.Tensor):
    """The forward network in the current graph; returns its output and the call-site details."""
    W0 = popxl.variable(np.random.normal(0, 0.02, (784, 32)), popxl.float32, name="W0")  # noqa: N806
    b0 = popxl.variable(np.random.normal(0, 0.02, (32,)), popxl.float32, name="b0")
    W1 = popxl.variable(np.random.normal(0, 0.02, (32, 10)), popxl.float32, name="W1")  # noqa: N806
    b1 = popxl.variable(np.random.normal(0, 0.02, (10,)), popxl.float32, name="b1")

    linear_0 = Linear()
    linear_graph_0 = ir.create_graph(linear_0, x, out_features=32)
    fwd_call_info_0 = ops.call_with_info(
        linear_graph_0, x, inputs_dict={linear_0.W: W0, linear_0.b: b0}
    )
    x1 = fwd_call_info_0.outputs[0]

    linear_1 = Linear()
    linear_graph_1 = ir.create_graph(linear_1, x1, out_features=10)
    fwd_call_info_1 = ops.call_with_info(
        linear_graph_1, x1, inputs_dict={linear_1.W: W1, linear_1.b: b1}
    )
    y = fwd_call_info_1.outputs[0]

    variables = {"W0": W0, "b0": b0, "W1": W1, "b1": b1}
    layers = ((linear_0, linear_graph_0, fwd_call_info_0), (linear_1, linear_graph_1,
                                                            fwd_call_info_1))
    return y, variables, layers


def build_train_ir(opts: argparse.Namespace):
    """Forward, loss, explicit backward of both layers and SGD updates, in one main graph."""
    ir = popxl.Ir()
    ir.num_host_transfers = 1
    ir.replication_factor = 1
    with ir.main_graph, popxl.in_sequence():
        img_stream = popxl.h2d_stream((opts.batch_size, 28, 28), popxl.float32, "image")
        img_t = ops.host_load(img_stream)
        label_stream = popxl.h2d_stream((opts.batch_size,), popxl.int32, "labels")
        labels = ops.host_load(label_stream, "labels")
        x = img_t.reshape((-1, 784))

        y, variables, layers = create_network_graph(ir, x)
        (linear_0, graph_0, call_0), (_, graph_1, call_1) = layers
        probs = ops.softmax(y, axis=-1)
        loss, dy = ops.nll_loss_with_softmax_grad(probs, labels)

        # Layer 1: all gradients, wired with inputs_dict + call_with_info.
        bwd_info_1 = autodiff(graph_1)
        activations_1 = bwd_info_1.inputs_dict(call_1)
        bwd_call_1 = ops.call_with_info(bwd_info_1.graph, dy, inputs_dict=activations_1)
        grads_1 = bwd_info_1.fwd_parent_ins_to_grad_parent_outs(call_1, bwd_call_1)
        grad_x1 = grads_1[call_1.parent_input(0)]

        # Layer 0: only W and b, in grads_required order, with a plain call.
        bwd_info_0 = autodiff(graph_0, grads_required=[linear_0.W, linear_0.b])
        activations_0 = bwd_info_0.inputs_dict(call_0)
        grad_w0, grad_b0 = ops.call(bwd_info_0.graph, grad_x1, inputs_dict=activations_0)

        updates = {
            variables["W1"]: grads_1[variables["W1"]],
            variables["b1"]: grads_1[variables["b1"]],
            variables["W0"]: grad_w0,
            variables["b0"]: grad_b0,
        }
        for param, grad in updates.items():
            ops.scaled_add_(param, grad, b=-opts.lr)

        loss_stream = popxl.d2h_stream(loss.shape, loss.dtype, "loss_stream")
        ops.host_store(loss_stream, loss)
    return ir, (img_stream, label_stream), variables, loss_stream


def build_test_ir(opts: argparse.Namespace):
    """The forward network alone, with fresh variables of the same names."""
    ir = popxl.Ir()
    with ir.main_graph:
        img_stream = popxl.h2d_stream((opts.test_batch_size, 28, 28), popxl.float32, "image")
        x = ops.host_load(img_stream).reshape((-1, 784))
        y, variables, _ = create_network_graph(ir, x)
        out_stream = popxl.d2h_stream(y.shape, y.dtype, "outputs")
        ops.host_store(out_stream, y)
    return ir, img_stream, variables, out_stream


def train(opts: argparse.Namespace, train_loader: DataLoader) -> dict[str, np.ndarray]:
    """Train for ``opts.epochs``; returns the trained weights by name."""
    with Timer("build training Ir"):
        ir, (img_stream, label_stream), variables, loss_stream = build_train_ir(opts)
    with Timer("create training Session"):
        session = popxl.Session(ir, "ipu_model")
    nbatches = min(len(train_loader), opts.limit_nbatches or len(train_loader))
    with session:
        for epoch in range(1, opts.epochs + 1):
            with Timer(f"epoch {epoch}"):
                bar = tqdm(limited(train_loader, opts.limit_nbatches), total=nbatches,
                           desc=f"Epoch {epoch}/{opts.epochs}")
                total = 0.0
                for step, (images, labels) in enumerate(bar, start=1):
                    outputs = session.run({img_stream: images, label_stream: labels})
                    total += float(outputs[loss_stream])
                    bar.set_postfix(loss=f"{total / step:.4f}")
    trained = session.get_tensors_data(variables.values())
    return {var.name: data for var, data in trained.items()}


def test(
    opts: argparse.Namespace, test_loader: DataLoader, weights: dict[str, np.ndarray]
) -> float:
    """Accuracy (percent) of the trained weights on the test set."""
    ir, img_stream, variables, out_stream = build_test_ir(opts)
    session = popxl.Session(ir, "ipu_model")
    session.write_variables_data({var: weights[var.name] for var in variables.values()})
    nbatches = min(len(test_loader), opts.limit_nbatches or len(test_loader))
    accuracies = []
    with session, Timer("testing"):
        for images, labels in tqdm(limited(test_loader, opts.limit_nbatches), total=nbatches,
                                   desc="Testing"):
            logits = session.run({img_stream: images})[out_stream]
            accuracies.append(float(np.mean(np.argmax(logits, axis=-1) == labels) * 100))
    return float(np.mean(accuracies))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="MNIST training in xlgraph (PopXL tutorial)")
    parser.add_argument("--batch-size", type=int, default=8, help="training batch size")
    parser.add_argument("--test-batch-size", type=int, default=80, help="test batch size")
    parser.add_argument("--epochs", type=int, default=1, help="training epochs")
    parser.add_argument("--lr", type=float, default=0.005, help="SGD learning rate")
    parser.add_argument("--limit-nbatches", type=int, default=None,
                        help="use only this many batches for training and for testing")
    parser.add_argument("--datasets-dir", default=None,
                        help="where the MNIST IDX files are (default ~/.torch/datasets)")
    parser.add_argument("--data-source", choices=("xlgraph", "torchvision"), default="xlgraph",
                        help="offline xlgraph.datasets (default) or torchvision")
    parser.add_argument("--seed", type=int, default=0, help="seed for weights and shuffling")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> float:
    opts = parse_args(argv)
    np.random.seed(opts.seed)
    train_loader, test_loader = get_mnist_data(opts)
    weights = train(opts, train_loader)
    accuracy = test(opts, test_loader, weights)
    print(f"Accuracy on test set: {accuracy:.2f}%")
    return accuracy


if __name__ == "__main__":
    main()
