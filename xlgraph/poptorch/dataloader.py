"""``poptorch.DataLoader``: a torch DataLoader whose batches feed one call of a wrapped model."""

from __future__ import annotations

import os
import warnings
from typing import Any

import torch

from xlgraph.poptorch.options import DataLoaderMode, Options

__all__ = ["DataLoader"]


class DataLoader(torch.utils.data.DataLoader):
    """Batches of ``batch_size x deviceIterations x replicas x gradientAccumulation`` items.

    Args:
        options: the ``poptorch.Options`` of the model the batches feed (frozen here).
        dataset, batch_size, shuffle, num_workers, drop_last: as torch's, with PopTorch's
            defaults (``drop_last=True``). ``num_workers`` is capped at the CPU count.
        persistent_workers: None means ``num_workers > 0``.
        mode: ``DataLoaderMode``; the simulator loads synchronously in every mode.
        **kwargs: passed to ``torch.utils.data.DataLoader``.
    """

    def __init__(self, options: Options, dataset: Any, batch_size: int = 1,
                 shuffle: bool | None = None, num_workers: int = 0, drop_last: bool = True,
                 persistent_workers: bool | None = None,
                 auto_distributed_partitioning: bool = True,
                 mode: DataLoaderMode = DataLoaderMode.Sync, async_options: Any = None,
                 rebatched_worker_size: int | None = None, **kwargs: Any) -> None:
        if not isinstance(options, Options):
            raise TypeError(f"poptorch.DataLoader needs a poptorch.Options as its first argument, "
                            f"got {type(options).__name__}")
        options.freeze()
        self.options = options
        self.combinedBatchSize = (batch_size * options.device_iterations  # noqa: N815
                                  * options.replication_factor
                                  * options.Training.gradient_accumulation)
        workers = min(num_workers, os.cpu_count() or 1)
        if persistent_workers is None:
            persistent_workers = workers > 0
        if not drop_last:
            warnings.warn("drop_last=False: a short last batch will not match the compiled "
                          "model's input shape", stacklevel=2)
        super().__init__(dataset, batch_size=self.combinedBatchSize, shuffle=bool(shuffle),
                         num_workers=workers, drop_last=drop_last,
                         persistent_workers=persistent_workers and workers > 0, **kwargs)

    def terminate(self) -> None:
        """Stop the worker processes (nothing to do for synchronous loading)."""
