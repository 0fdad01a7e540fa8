"""``xlgraph-run``: start a program as several instances through MPI's ``mpiexec``.

Usage::

    xlgraph-run --num-instances I --num-replicas R [mpiexec options] [--] COMMAND...

Each instance runs COMMAND with the job described in its environment (``xlgraph.dist``), so
``Ir(replication="popdist")`` takes R replicas, R / I of them in this process. Options before
COMMAND that xlgraph-run does not know (``-hosts a,b``, ``-ppn 1``, ...) go to ``mpiexec``.
Each instance runs under a guard (``xlgraph.dist.guard``): when one fails, the others first get
a moment to report it themselves (collectives also wait at most ``--timeout`` seconds, and an
instance that finishes waits at most that long for the others to finish), then ``mpiexec`` ends
the job; its exit status is non-zero.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from xlgraph.dist import NUM_INSTANCES, NUM_REPLICAS, TIMEOUT

__all__ = ["main", "mpiexec_command", "MAX_COUNT"]

MAX_COUNT = 2**31 - 1  # mpiexec reads -n as a C int: a larger count wraps around

# Hydra (MPICH) options that take values; every other option stands alone.
_VALUES = {"-genv": 2, "-env": 2, "-hosts": 1, "-host": 1, "-f": 1, "-hostfile": 1,
           "-machinefile": 1, "-ppn": 1, "-launcher": 1, "-launcher-exec": 1, "-bind-to": 1,
           "-map-by": 1, "-iface": 1, "-wdir": 1, "-genvlist": 1, "-envlist": 1, "-rmk": 1}


def at_least_one(text: str) -> int:
    """An argparse type: a whole number from 1 to ``MAX_COUNT`` (the error names the range)."""
    if not text.strip().isdecimal() or not 1 <= int(text) <= MAX_COUNT:
        raise argparse.ArgumentTypeError(
            f"must be a whole number from 1 to {MAX_COUNT}, got {text!r}")
    return int(text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="xlgraph-run", description="Run COMMAND as instances of an xlgraph job via MPI.",
        add_help=False, allow_abbrev=False)
    parser.add_argument("--help", action="help", help="show this help and exit")
    parser.add_argument("--num-instances", type=at_least_one, required=True,
                        help=f"processes to start (1 to {MAX_COUNT})")
    parser.add_argument("--num-replicas", type=at_least_one, required=True,
                        help="replicas over all instances (a multiple of --num-instances)")
    parser.add_argument("--timeout", type=at_least_one, default=60,
                        help="seconds a collective waits for the other instances (default 60)")
    parser.add_argument("--mpiexec", default=None, help="the mpiexec to use (default: found)")
    return parser


def _own_options(argv: Sequence[str]) -> int:
    """How many leading arguments are xlgraph-run's own options (and their values)."""
    own = {"--num-instances", "--num-replicas", "--timeout", "--mpiexec"}
    i = 0
    while i < len(argv):
        name = argv[i].split("=", 1)[0]
        if name == "--help":
            i += 1
        elif name in own:
            i += 1 if "=" in argv[i] else 2
        else:
            break
    return i


def _split(rest: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(mpiexec options, command)`` from the arguments after xlgraph-run's own."""
    options: list[str] = []
    i = 0
    while i < len(rest) and rest[i].startswith("-"):
        if rest[i] == "--":
            return options, list(rest[i + 1:])
        take = 1 + _VALUES.get(rest[i], 0)
        options.extend(rest[i:i + take])
        i += take
    return options, list(rest[i:])


def _find_mpiexec() -> str:
    beside = Path(sys.executable).with_name("mpiexec")
    found = str(beside) if beside.exists() else shutil.which("mpiexec")
    if found is None:
        raise SystemExit("xlgraph-run: no mpiexec found; install the 'dist' extra "
                         "(pip install 'xlgraph[dist]') or pass --mpiexec")
    return found


def mpiexec_command(argv: Sequence[str], mpiexec_options: Sequence[str] = ()) -> list[str]:
    """The ``mpiexec`` command line that ``xlgraph-run argv`` runs (``mpiexec_options`` go to
    ``mpiexec`` before those in ``argv``)."""
    n = _own_options(argv)
    args = _parser().parse_args(argv[:n])
    options, command = _split(argv[n:])
    if not command:
        raise SystemExit("xlgraph-run: no COMMAND given")
    if args.num_replicas % args.num_instances:
        raise SystemExit(f"xlgraph-run: --num-replicas {args.num_replicas} must be a multiple "
                         f"of --num-instances {args.num_instances}")
    env = {NUM_INSTANCES: args.num_instances, NUM_REPLICAS: args.num_replicas,
           TIMEOUT: args.timeout}
    genv = [x for name, value in env.items() for x in ("-genv", name, str(value))]
    return [args.mpiexec or _find_mpiexec(), "-n", str(args.num_instances), *genv,
            *mpiexec_options, *options,
            sys.executable, "-m", "xlgraph.dist.guard", *command]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the job; returns its exit status."""
    command = mpiexec_command(sys.argv[1:] if argv is None else argv)
    return subprocess.call(command, env=os.environ.copy())


if __name__ == "__main__":
    sys.exit(main())
