"""Shared pieces of the CNN examples: arguments, data, the epoch loop and evaluation."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

import xlgraph
from xlgraph import checkpoint, nn, training
from xlgraph.data import DataLoader
from xlgraph.datasets import normalize
from xlgraph.optim import Optimizer

IMAGE = (1, 28, 28)


def add_arguments(parser: argparse.ArgumentParser, *, batch_size: int, lr: float,
                  epochs: int) -> None:
    """The flags both examples share, with each example's defaults."""
    parser.add_argument("--batch-size", type=int, default=batch_size, help="training batch size")
    parser.add_argument("--test-batch-size", type=int, default=80, help="test batch size")
    parser.add_argument("--epochs", type=int, default=epochs, help="training epochs")
    parser.add_argument("--lr", type=float, default=lr, help="SGD learning rate")
    parser.add_argument("--device-iterations", type=int, default=50,
                        help="training steps per Session.run (ir.num_host_transfers)")
    parser.add_argument("--limit-nbatches", type=int, default=None,
                        help="use only this many batches for training and for testing")
    parser.add_argument("--datasets-dir", default=None,
                        help="where the IDX files are (default ~/.torch/datasets)")
    parser.add_argument("--seed", type=int, default=0, help="seed of weights, shuffling, dropout")


def load_split(load: Callable[..., tuple[np.ndarray, np.ndarray]], mean: float, std: float,
               opts: argparse.Namespace, train: bool) -> tuple[np.ndarray, np.ndarray]:
    """Normalised ``(N, 1, 28, 28)`` float32 images and int32 labels of one split."""
    images, labels = load(opts.datasets_dir, train=train)
    if opts.limit_nbatches:
        keep = opts.limit_nbatches * (opts.batch_size if train else opts.test_batch_size)
        images, labels = images[:keep], labels[:keep]
    x = normalize(images, mean, std).reshape((-1, *IMAGE))
    return x, labels.astype(np.int32)


def largest_divisor(n: int, at_most: int) -> int:
    """The largest divisor of ``n`` that is at most ``at_most`` (device iterations per run)."""
    return max(d for d in range(1, min(n, at_most) + 1) if n % d == 0)


@dataclass
class EpochResult:
    epoch: int
    loss: float
    seconds: float
    accuracy: float


class Evaluator:
    """An inference Ir of ``model`` over the whole test set, ``test_batch_size`` per batch."""

    def __init__(self, model: nn.Layer, x: np.ndarray, y: np.ndarray, batch: int) -> None:
        nbatches = len(x) // batch
        if nbatches == 0:
            raise ValueError(f"the test set ({len(x)} images) is smaller than one batch ({batch})")
        self.n = largest_divisor(nbatches, 25)
        self.loader = DataLoader(x, y, batch_size=batch, drop_last=True,
                                 num_host_transfers=self.n)
        ir = xlgraph.Ir()
        self.step = training.build_inference(ir, model, [xlgraph.TensorSpec(
            (batch, *IMAGE), xlgraph.float32)], num_host_transfers=self.n)
        self.session = xlgraph.Session(ir, "ipu_model")

    def predict(self, weights: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Predicted and true labels of the test set with ``weights`` loaded."""
        checkpoint.load_into(self.session, weights)
        preds, labels = [], []
        with self.session:
            for images, y in self.loader:
                (out,) = self.step.run(self.session, images)
                preds.append(np.argmax(out, axis=-1).reshape(-1))
                labels.append(y.reshape(-1))
        return np.concatenate(preds), np.concatenate(labels)


def fit(opts: argparse.Namespace, model: nn.Layer, loss: Callable[..., xlgraph.Tensor],
        optimizer: Optimizer, train_data: tuple[np.ndarray, np.ndarray],
        evaluator: Evaluator, dropout: bool,
        ) -> tuple[list[EpochResult], dict[str, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Train for ``opts.epochs``, testing after each epoch.

    Returns:
        One ``EpochResult`` per epoch, the trained weights by name, and the last epoch's
        predicted and true test labels.
    """
    x, y = train_data
    nbatches = len(x) // opts.batch_size
    n = largest_divisor(nbatches, opts.device_iterations)
    loader = DataLoader(x, y, batch_size=opts.batch_size, shuffle=True, seed=opts.seed,
                        drop_last=True, num_host_transfers=n)
    ir = xlgraph.Ir()
    step = training.build_train_step(
        ir, model, loss, optimizer, inputs=[xlgraph.TensorSpec((opts.batch_size, *IMAGE),
                                                               xlgraph.float32)],
        targets=[xlgraph.TensorSpec((opts.batch_size,), xlgraph.int32)],
        seed=opts.seed if dropout else None, init_seed=opts.seed, num_host_transfers=n)
    session = xlgraph.Session(ir, "ipu_model")
    print(f"Training: {nbatches} batches of {opts.batch_size} per epoch, {n} per run")
    results = []
    with session:
        for epoch in range(1, opts.epochs + 1):
            start = time.perf_counter()
            bar = tqdm(loader, desc=f"Epoch {epoch}/{opts.epochs}", total=len(loader))
            losses = []
            for images, labels in bar:
                losses.append(step.run(session, images, labels))
                bar.set_postfix(loss=f"{np.mean(losses[-20:]):.4f}")
            seconds = time.perf_counter() - start
            weights = {k: session.get_tensor_data(v) for k, v in step.params.items()}
            preds, truth = predictions = evaluator.predict(weights)
            accuracy = float(np.mean(preds == truth) * 100)
            mean_loss = float(np.mean(np.concatenate(losses)))
            results.append(EpochResult(epoch, mean_loss, seconds, accuracy))
            print(f"Epoch {epoch}: loss {mean_loss:.4f}, {seconds:.1f} s, "
                  f"test accuracy {accuracy:.2f}%")
    return results, weights, predictions
