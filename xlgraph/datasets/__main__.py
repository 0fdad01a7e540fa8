"""``python -m xlgraph.datasets fetch NAME... [--data-dir DIR]``: fetch and verify datasets."""

from __future__ import annotations

import argparse
import sys

from xlgraph.datasets.catalog import DATASETS
from xlgraph.datasets.store import data_root, fetch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m xlgraph.datasets",
        description="Fetch datasets into the data root and check every file's SHA-256 (files "
                    "that are missing or fail the check are fetched again).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    get = sub.add_parser("fetch", help="fetch and verify datasets")
    get.add_argument("names", nargs="+", choices=sorted(DATASETS), metavar="NAME",
                     help=f"one or more of {', '.join(sorted(DATASETS))}")
    get.add_argument("--data-dir", default=str(data_root()), help="dataset root")
    args = parser.parse_args(argv)
    for name in args.names:
        try:
            raw = fetch(name, args.data_dir)
        except (OSError, RuntimeError, ValueError) as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            return 1
        print(f"{DATASETS[name].title}: {raw} holds the 4 files, SHA-256 verified")
    return 0


if __name__ == "__main__":
    sys.exit(main())
