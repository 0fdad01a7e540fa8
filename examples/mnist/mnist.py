"""The PopXL MNIST tutorial, ported to xlgraph: a two-layer network trained with explicit autodiff.

Run ``python examples/mnist/mnist.py`` (see ``--help``). The only change from the PopXL program
is ``import xlgraph as popxl``; data comes from ``xlgraph.datasets`` (offline) or torchvision.
``--device-iterations N`` runs N training steps per ``Session.run`` in a device loop (PopTorch's
``deviceIterations``; the tutorial's one step per run is the default). The training curve and the
confusion matrix are saved as PNGs in ``--output-dir`` when matplotlib is installed.
``--replication-factor R`` trains R data-parallel replicas of ``--batch-size`` each, averaging
their gradients (PopXL's ``mnist_rts.py``); ``--rts`` also shards W0 and W1 over the replicas.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass, field
from typing import Any

import common
import numpy as np
import plots

import xlgraph as popxl
import xlgraph.ops as ops
from xlgraph.data import DataLoader
from xlgraph.datasets import MNIST_MEAN, MNIST_STD, load_mnist, normalize
from xlgraph.ops.collectives import (
    replicated_all_gather,
    replicated_all_reduce,
    replicated_reduce_scatter,
)
from xlgraph.transforms import autodiff

DIGITS = tuple(str(d) for d in range(10))


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


def _torchvision_split(data_dir: str, train: bool) -> tuple[np.ndarray, np.ndarray]:
    torchvision = common.require("torchvision", "--data-source torchvision",
                                 "pip install torchvision, or use --data-source xlgraph")
    ds = torchvision.datasets.MNIST(os.path.expanduser(data_dir), train=train, download=True)
    return ds.data.numpy(), ds.targets.numpy()


@Timer("get_mnist_data")
def get_mnist_data(opts: argparse.Namespace) -> tuple[DataLoader, DataLoader]:
    """Training and test loaders of normalised MNIST (shuffled, incomplete batches dropped).

    The training loader yields groups of up to ``opts.device_iterations`` batches (the largest
    count that divides the number of batches); ``--limit-nbatches N`` keeps N batches per split.
    """
    loaders = []
    train_batch = opts.batch_size * opts.replication_factor  # one batch per replica
    for train, batch in ((True, train_batch), (False, opts.test_batch_size)):
        if opts.data_source == "torchvision":
            images, labels = _torchvision_split(opts.data_dir, train)
        else:
            images, labels = load_mnist(opts.data_dir, train=train)
        if opts.limit_nbatches:
            keep = batch * opts.limit_nbatches
            images, labels = images[:keep], labels[:keep]
        x = normalize(images, MNIST_MEAN, MNIST_STD)
        per_run = common.largest_divisor(len(x) // batch, opts.device_iterations) if train else 1
        loaders.append(DataLoader(x, labels.astype(np.int32), batch_size=batch, shuffle=True,
                                  seed=opts.seed + int(train), drop_last=True,
                                  num_host_transfers=per_run))
    return loaders[0], loaders[1]


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


def create_variables(sharded: tuple[str, ...] = ()) -> dict[str, popxl.Tensor]:
    """The network's weights, drawn from N(0, 0.02) as in the tutorial; the ``sharded`` ones
    are replica-sharded remote variables (``replica_sharded_variable``)."""
    shapes = {"W0": (784, 32), "b0": (32,), "W1": (32, 10), "b1": (10,)}
    variables = {}
    for name, shape in shapes.items():
        data = np.random.normal(0, 0.02, shape)
        if name in sharded:
            variables[name], _ = popxl.replica_sharded_variable(data, popxl.float32, name)
        else:
            variables[name] = popxl.variable(data, popxl.float32, name=name)
    return variables


def create_network_graph(ir: popxl.Ir, x: popxl.Tensor, params: dict[str, popxl.Tensor]):
    """The forward network in the current graph; returns its output and the call-site details.

    ``params`` are the variables, or the weight inputs of the step graph a device loop repeats.
    """
    linear_0 = Linear()
    linear_graph_0 = ir.create_graph(linear_0, x, out_features=32)
    fwd_call_info_0 = ops.call_with_info(
        linear_graph_0, x, inputs_dict={linear_0.W: params["W0"], linear_0.b: params["b0"]}
    )
    x1 = fwd_call_info_0.outputs[0]

    linear_1 = Linear()
    linear_graph_1 = ir.create_graph(linear_1, x1, out_features=10)
    fwd_call_info_1 = ops.call_with_info(
        linear_graph_1, x1, inputs_dict={linear_1.W: params["W1"], linear_1.b: params["b1"]}
    )
    y = fwd_call_info_1.outputs[0]

    layers = ((linear_0, linear_graph_0, fwd_call_info_0), (linear_1, linear_graph_1,
                                                            fwd_call_info_1))
    return y, layers


def build_train_step(ir: popxl.Ir, opts: argparse.Namespace, streams, params, loss_stream):
    """One training step in the current graph: forward, loss, explicit backward, SGD updates."""
    img_stream, label_stream = streams
    img_t = ops.host_load(img_stream)
    labels = ops.host_load(label_stream, "labels")
    x = img_t.reshape((-1, 784))

    shards = {n: p for n, p in params.items() if p.meta_shape}  # --rts: gather whole weights
    params = {**params, **{n: replicated_all_gather(p) for n, p in shards.items()}}
    y, layers = create_network_graph(ir, x, params)
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
        params["W1"]: grads_1[params["W1"]],
        params["b1"]: grads_1[params["b1"]],
        params["W0"]: grad_w0,
        params["b0"]: grad_b0,
    }
    for name, shard in shards.items():  # each replica updates its shard of the mean gradient
        updates[shard] = replicated_reduce_scatter(
            updates.pop(params[name]), "mean", configure_output_for_replicated_tensor_sharding=True)
    for param, grad in updates.items():
        if opts.replication_factor > 1 and not grad.meta_shape:
            grad = replicated_all_reduce(grad, "mean")
        ops.scaled_add_(param, grad, b=-opts.lr)
    ops.host_store(loss_stream, loss)


def build_train_ir(opts: argparse.Namespace, steps_per_run: int = 1):
    """The training Ir: one step in the main graph, or ``steps_per_run`` steps in a device loop.

    With ``steps_per_run > 1`` the step is a subgraph that ``ops.repeat`` runs ``steps_per_run``
    times per ``Session.run`` (``ir.num_host_transfers``); its weight inputs are ``by_ref``, so
    the in-place updates reach the variables.
    """
    ir = popxl.Ir(replication=opts.replication_factor)
    ir.num_host_transfers = steps_per_run
    with ir.main_graph, popxl.in_sequence():
        img_stream = popxl.h2d_stream((opts.batch_size, 28, 28), popxl.float32, "image")
        label_stream = popxl.h2d_stream((opts.batch_size,), popxl.int32, "labels")
        loss_stream = popxl.d2h_stream((), popxl.float32, "loss_stream")
        variables = create_variables(("W0", "W1") if opts.rts else ())
        # a sharded variable's shard, loaded from remote memory, stands in for it in the step
        shards = {n: ops.remote_load(v.remote.buffer, v.remote.offset, n)
                  for n, v in variables.items() if getattr(v, "remote", None)}
        variables_or_shards = {**variables, **shards}
    streams = (img_stream, label_stream)
    if steps_per_run == 1:
        with ir.main_graph, popxl.in_sequence():
            build_train_step(ir, opts, streams, variables_or_shards, loss_stream)
    else:
        step_graph = ir.create_empty_graph("train_step")
        with step_graph, popxl.in_sequence():
            params = {name: popxl.graph_input(v.shape, v.dtype, name, by_ref=True,
                                              meta_shape=v.meta_shape)
                      for name, v in variables_or_shards.items()}
            build_train_step(ir, opts, streams, params, loss_stream)
        with ir.main_graph:
            ops.repeat(step_graph, steps_per_run,
                       inputs_dict={params[name]: v for name, v in variables_or_shards.items()})
    with ir.main_graph, popxl.in_sequence():
        for name, shard in shards.items():
            ops.remote_store(variables[name].remote.buffer, variables[name].remote.offset, shard)
    return ir, streams, variables, loss_stream


def build_test_ir(opts: argparse.Namespace):
    """The forward network alone, with fresh variables of the same names."""
    ir = popxl.Ir()
    with ir.main_graph:
        img_stream = popxl.h2d_stream((opts.test_batch_size, 28, 28), popxl.float32, "image")
        x = ops.host_load(img_stream).reshape((-1, 784))
        variables = create_variables()
        y, _ = create_network_graph(ir, x, variables)
        out_stream = popxl.d2h_stream(y.shape, y.dtype, "outputs")
        ops.host_store(out_stream, y)
    return ir, img_stream, variables, out_stream


def train(opts: argparse.Namespace,
          train_loader: DataLoader) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
    """Train for ``opts.epochs``; returns the trained weights by name and the step losses."""
    per_run = train_loader.num_host_transfers
    with Timer("build training Ir"):
        ir, (img_stream, label_stream), variables, loss_stream = build_train_ir(opts, per_run)
    with Timer("create training Session"):
        session = popxl.Session(ir, "ipu_model")
    nbatches = len(train_loader) * per_run
    losses: list[np.ndarray] = []
    with session:
        for epoch in range(1, opts.epochs + 1):
            epoch_losses: list[np.ndarray] = []
            in_steps = 0.0
            with Timer(f"epoch {epoch}"), common.Progress(
                    nbatches, f"Epoch {epoch}/{opts.epochs}") as progress:
                for images, labels in train_loader:
                    images = common.per_replica(opts.replication_factor, images, 2)
                    labels = common.per_replica(opts.replication_factor, labels, 0)
                    start = time.perf_counter()
                    outputs = session.run({img_stream: images, label_stream: labels})
                    in_steps += time.perf_counter() - start
                    epoch_losses.append(np.atleast_1d(outputs[loss_stream]))
                    progress.advance(per_run, epoch_losses[-1])
            losses.append(np.concatenate(epoch_losses))
            print(f"Epoch {epoch}: {nbatches} steps ({per_run} per Session.run), mean loss "
                  f"{np.mean(losses[-1]):.4f}, {in_steps:.3f} s in Session.run")
    trained = session.get_tensors_data(variables.values())
    common.print_report(opts, session)
    return {var.name: data for var, data in trained.items()}, losses


def test(opts: argparse.Namespace, test_loader: DataLoader,
         weights: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Predicted and true labels of the test set with the trained weights."""
    ir, img_stream, variables, out_stream = build_test_ir(opts)
    session = popxl.Session(ir, "ipu_model")
    session.write_variables_data({var: weights[var.name] for var in variables.values()})
    preds, truth = [], []
    with session, Timer("testing"), common.Progress(len(test_loader), "Testing") as progress:
        for images, labels in test_loader:
            logits = session.run({img_stream: images})[out_stream]
            preds.append(np.argmax(logits, axis=-1))
            truth.append(labels)
            progress.advance(1)
    return np.concatenate(preds), np.concatenate(truth)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = common.make_parser("MNIST training in xlgraph (PopXL tutorial)", "mnist", epochs=1,
                                batch_size=8)
    parser.add_argument("--lr", type=float, default=0.005, help="SGD learning rate")
    parser.add_argument("--device-iterations", type=int, default=1,
                        help="training steps per Session.run (ir.num_host_transfers, a device "
                             "loop; seed 000 uses 50)")
    parser.add_argument("--limit-nbatches", type=int, default=None,
                        help="use only this many batches for training and for testing")
    parser.add_argument("--data-source", choices=("xlgraph", "torchvision"), default="xlgraph",
                        help="offline xlgraph.datasets or torchvision")
    parser.add_argument("--seed", type=int, default=0, help="seed for weights and shuffling")
    parser.add_argument("--replication-factor", type=int, default=1,
                        help="data-parallel replicas, each training on --batch-size samples")
    parser.add_argument("--rts", action="store_true",
                        help="replicated tensor sharding: each replica stores a shard of W0 "
                             "and W1 in remote memory")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> float:
    opts = parse_args(argv)
    np.random.seed(opts.seed)
    train_loader, test_loader = get_mnist_data(opts)
    weights, losses = train(opts, train_loader)
    preds, labels = test(opts, test_loader, weights)
    accuracy = float(np.mean(preds == labels) * 100)
    print(f"Accuracy on test set: {accuracy:.2f}%")
    matrix = plots.confusion_matrix(preds, labels)
    plots.save_figures(opts.output_dir, "MNIST (PopXL tutorial)", losses, [accuracy], matrix,
                       DIGITS)
    return accuracy


if __name__ == "__main__":
    main()
