"""The command line every example shares: ``--epochs``, ``--batch-size``, ``--output-dir`` and
``--data-dir``, with their defaults shown by ``--help``.

It imports only the standard library, so ``--help`` answers before torch or xlgraph load.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path


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
