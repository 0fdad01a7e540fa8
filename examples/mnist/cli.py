"""The command line every example shares: ``--epochs``, ``--batch-size``, ``--output-dir`` and
``--data-dir``, with their defaults shown by ``--help``; and ``EpochSplit``, which times an
epoch's steps, data and the rest.

It imports only the standard library, so ``--help`` answers before torch or xlgraph load.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def default_data_dir() -> str:
    """``$XLGRAPH_DATA``, else ``~/.torch/datasets`` (where ``xlgraph.datasets`` looks)."""
    return (os.environ.get("XLGRAPH_DATA") or os.environ.get("XLGRAPH_DATASETS")
            or os.path.join("~", ".torch", "datasets"))


def make_parser(example: str, description: str, *, epochs: int,
                batch_size: int) -> argparse.ArgumentParser:
    """A parser with the four shared flags; ``--output-dir`` defaults to ``runs/<example>``."""
    parser = argparse.ArgumentParser(description=description,
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--epochs", type=int, default=epochs, help="training epochs")
    parser.add_argument("--batch-size", type=int, default=batch_size, help="training batch size")
    parser.add_argument("--output-dir", type=Path, default=Path("runs") / example,
                        help="where every file the run writes goes (plots, weights)")
    parser.add_argument("--data-dir", "--datasets-dir", dest="data_dir",
                        default=default_data_dir(),
                        help="dataset root: <DIR>/MNIST/raw and <DIR>/FashionMNIST/raw hold the "
                             "IDX files (fetched there when missing)")
    return parser


class EpochSplit:
    """Where an epoch's wall time goes: inside the training steps, waiting for the next batch,
    and everything else (the progress bar, reading the loss, the loop itself).

    ``batches(loader)`` wraps the loader and times each ``next``; ``with split.step():`` times
    one step; ``summary()`` reports the last epoch (from the first batch asked for to the last).
    The very first step also compiles the model; the summary of its epoch says how long it took.
    The same parts are also kept in this thread's CPU seconds (``*_cpu_s``), which a busy
    machine inflates less than wall time.
    """

    def __init__(self) -> None:
        self.steps_s = self.data_s = self.wall_s = 0.0
        self.steps_cpu_s = self.data_cpu_s = self.cpu_s = 0.0
        self.first_step_s: float | None = None  # the first step of all, with the compilation
        self.compiled_this_epoch = False

    def batches(self, loader: Any) -> Iterable[Any]:
        """``loader``, timed: an iterable of the same batches with the same ``len``."""
        return _Timed(self, loader)

    @contextmanager
    def step(self) -> Iterator[None]:
        """Time the body as a training step."""
        started, cpu = time.perf_counter(), time.thread_time()
        try:
            yield
        finally:
            seconds = time.perf_counter() - started
            self.steps_s += seconds
            self.steps_cpu_s += time.thread_time() - cpu
            if self.first_step_s is None:
                self.first_step_s, self.compiled_this_epoch = seconds, True

    def summary(self) -> str:
        """``"9.12 s: steps 8.01 s, data 0.40 s (5.0% of steps), other 0.71 s"``, and in the first
        epoch ``" (the first step, which compiled the model, took 1.80 s)"``."""
        other = self.wall_s - self.steps_s - self.data_s
        share = 100 * self.data_s / self.steps_s if self.steps_s else 0.0
        text = (f"{self.wall_s:.2f} s: steps {self.steps_s:.2f} s, data {self.data_s:.2f} s "
                f"({share:.1f}% of steps), other {other:.2f} s")
        if self.compiled_this_epoch:
            text += f" (the first step, which compiled the model, took {self.first_step_s:.2f} s)"
        return text


class _Timed:
    def __init__(self, split: EpochSplit, loader: Any) -> None:
        self.split, self.loader = split, loader

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        split, clock, cpu_clock = self.split, time.perf_counter, time.thread_time
        started, cpu_started = clock(), cpu_clock()
        batches = iter(self.loader)
        split.steps_s, split.data_s = 0.0, clock() - started
        split.steps_cpu_s, split.data_cpu_s = 0.0, cpu_clock() - cpu_started
        split.compiled_this_epoch = False
        try:
            while True:
                before, cpu_before = clock(), cpu_clock()
                try:
                    batch = next(batches)
                except StopIteration:
                    return
                finally:
                    split.data_s += clock() - before
                    split.data_cpu_s += cpu_clock() - cpu_before
                yield batch
        finally:
            split.wall_s, split.cpu_s = clock() - started, cpu_clock() - cpu_started
