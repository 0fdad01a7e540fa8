"""Shared pieces of the MNIST examples: arguments, data, progress, the epoch loop and evaluation."""

from __future__ import annotations

import argparse
import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import cli
import numpy as np
import plots

import xlgraph
from xlgraph import checkpoint, nn, training
from xlgraph.data import DataLoader
from xlgraph.datasets import normalize
from xlgraph.optim import Optimizer
from xlgraph.progress import tqdm

IMAGE = (1, 28, 28)
IPU = xlgraph.IPUModel.full()  # the CNNs' activations need a whole chip, not 4 tiles


def make_parser(description: str, example: str, *, epochs: int,
                batch_size: int) -> argparse.ArgumentParser:
    """The shared command line (``cli.make_parser``) plus ``--test-batch-size`` and ``--report``."""
    parser = cli.make_parser(example, description, epochs=epochs, batch_size=batch_size)
    parser.add_argument("--test-batch-size", type=int, default=80, help="test batch size")
    parser.add_argument("--report", action="store_true",
                        help="print the IPU model's memory and cycle estimates of the training "
                             "program at the end")
    return parser


def print_report(opts: argparse.Namespace, session: xlgraph.Session) -> None:
    """With ``--report``, print the modelled IPU's report of ``session``'s program."""
    if opts.report:
        print(session.report())


def require(module: str, what: str, install: str) -> ModuleType:
    """Import ``module``, or end the program with one line naming what needs it and the fix."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise SystemExit(f"{what} needs {module}, which is not installed: {install}") from None


class Progress:
    """A tqdm bar over batches that redraws at most twice a second.

    It stays silent when stderr is not a terminal or ``XLGRAPH_PROGRESS=0``
    (``xlgraph.progress``), so a redirected run logs no redraws, and ``advance`` averages the
    loss shown only when the bar is about to redraw.
    """

    INTERVAL = 0.5

    def __init__(self, total_batches: int, desc: str) -> None:
        self.bar = tqdm(total=total_batches, desc=desc, unit="batch",
                        mininterval=self.INTERVAL)
        self._next_postfix = 0.0
        self._last: np.ndarray | None = None

    def advance(self, batches: int, losses: np.ndarray | None = None) -> None:
        """Count ``batches`` more; the mean of their ``losses`` is shown beside the bar."""
        if losses is not None and not self.bar.disable:
            self._last = losses
            now = time.perf_counter()
            if now >= self._next_postfix:
                self._show(losses)
                self._next_postfix = now + self.INTERVAL
        self.bar.update(batches)

    def _show(self, losses: np.ndarray) -> None:
        self.bar.set_postfix(loss=f"{np.mean(losses):.4f}", refresh=False)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._last is not None:
            self._show(self._last)  # the final draw shows the last loss
        self.bar.close()


def add_arguments(parser: argparse.ArgumentParser, *, lr: float) -> None:
    """The flags both CNN examples share, with each example's learning rate."""
    parser.add_argument("--lr", type=float, default=lr, help="SGD learning rate")
    parser.add_argument("--device-iterations", type=int, default=50,
                        help="training steps per Session.run (ir.num_host_transfers)")
    parser.add_argument("--limit-nbatches", type=int, default=None,
                        help="use only this many batches for training and for testing")
    parser.add_argument("--seed", type=int, default=0, help="seed of weights, shuffling, dropout")


def load_split(load: Callable[..., tuple[np.ndarray, np.ndarray]], mean: float, std: float,
               opts: argparse.Namespace, train: bool) -> tuple[np.ndarray, np.ndarray]:
    """Normalised ``(N, 1, 28, 28)`` float32 images and int32 labels of one split."""
    images, labels = load(opts.data_dir, train=train)
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
    """One epoch: mean loss, wall time, time inside ``Session.run``, test accuracy, step losses."""

    epoch: int
    loss: float
    seconds: float
    accuracy: float
    step_seconds: float = 0.0
    losses: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32), repr=False)


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
        self.session = xlgraph.Session(ir, "ipu_model", ipu_model=IPU)

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
    session = xlgraph.Session(ir, "ipu_model", ipu_model=IPU)
    print(f"Training: {nbatches} batches of {opts.batch_size} per epoch, {n} per run")
    results = []
    with session:
        for epoch in range(1, opts.epochs + 1):
            start = time.perf_counter()
            losses: list[np.ndarray] = []
            in_steps = 0.0
            with Progress(len(loader) * n, f"Epoch {epoch}/{opts.epochs}") as progress:
                for images, labels in loader:
                    before = time.perf_counter()
                    losses.append(step.run(session, images, labels))
                    in_steps += time.perf_counter() - before
                    progress.advance(n, losses[-1])
            seconds = time.perf_counter() - start
            weights = {k: session.get_tensor_data(v) for k, v in step.params.items()}
            preds, truth = predictions = evaluator.predict(weights)
            accuracy = float(np.mean(preds == truth) * 100)
            step_losses = np.concatenate(losses)
            mean_loss = float(np.mean(step_losses))
            results.append(EpochResult(epoch, mean_loss, seconds, accuracy, in_steps,
                                       step_losses))
            print(f"Epoch {epoch}: loss {mean_loss:.4f}, {seconds:.2f} s "
                  f"({in_steps:.2f} s in Session.run), test accuracy {accuracy:.2f}%")
    print_report(opts, session)
    return results, weights, predictions


def save_plots(opts: argparse.Namespace, title: str, results: list[EpochResult],
               predictions: tuple[np.ndarray, np.ndarray],
               class_names: tuple[str, ...]) -> np.ndarray:
    """Save the training curve and confusion matrix PNGs; returns the confusion matrix."""
    matrix = plots.confusion_matrix(*predictions, len(class_names))
    plots.save_figures(opts.output_dir, title, [r.losses for r in results],
                       [r.accuracy for r in results], matrix, class_names)
    return matrix



def per_replica(replicas: int, array: np.ndarray, item_rank: int) -> np.ndarray:
    """Host data ``(..., batch, *item)`` as ``(..., replicas, batch / replicas, *item)``, the
    layout ``Session.run`` takes for a replicated Ir (``array`` itself for one replica)."""
    if replicas == 1:
        return array
    axis = array.ndim - item_rank - 1
    return array.reshape(*array.shape[:axis], replicas, -1, *array.shape[axis + 1:])
