"""``poprun``: Graphcore's launcher of multi-instance PopXL programs, over ``xlgraph-run``.

Usage::

    poprun --num-instances I --num-replicas R [poprun options] COMMAND [ARGS...]

starts COMMAND (``python train.py --lr 0.1``, with its arguments untouched) as I MPI
instances of an R-replica job, as ``xlgraph-run`` does (each instance runs under its guard;
one that fails ends the job). Every Python process of the job imports ``popxl``,
``popxl_addons``, ``popart`` and ``popdist`` as the PopXL runner gives them
(``xlgraph.popxl_compat.reach_children``): ``popdist`` answers as inside poprun, and
``Session(ir, "ipu_hw")`` runs on the ipu_model of a whole chip.

Options that describe only the hardware (the V-IPU server and partition, NUMA placement,
IPU-link domains, the executable cache) are accepted and ignored; ``HARDWARE_ONLY`` lists them.
``--mpi-global-args`` and ``--mpi-local-args`` are OpenMPI options in poprun; the common ones
are translated for MPICH's ``mpiexec`` (``-x NAME=VALUE`` sets NAME in every instance,
``--tag-output`` prefixes lines with the instance; ``-x NAME``, ``--allow-run-as-root``,
``--mca``, ``--oversubscribe`` are dropped because MPICH passes the whole environment and needs
none of them) and the rest are given to ``mpiexec`` as they are.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence

from xlgraph.dist import IPUS_PER_REPLICA, TIMEOUT
from xlgraph.dist.guard import OUTPUT_INSTANCE
from xlgraph.dist.run import at_least_one, mpiexec_command

__all__ = ["main", "poprun_command", "HARDWARE_ONLY"]

# poprun options with no meaning without IPUs: accepted, checked for a value, not used
HARDWARE_ONLY = ("--num-ilds", "--numa-aware", "--vipu-server-host", "--vipu-server-port",
                 "--vipu-server-timeout", "--vipu-partition", "--vipu-cluster",
                 "--vipu-allocation", "--update-partition", "--reset-partition",
                 "--remove-partition", "--print-topology", "--executable-cache-path",
                 "--offline-mode", "--ipus-per-ild")
# OpenMPI options (poprun's MPI) and what MPICH's mpiexec takes for them: (values, hydra)
_OPENMPI = {"--tag-output": (0, ["-prepend-rank"]), "--allow-run-as-root": (0, []),
            "--oversubscribe": (0, []), "--mca": (2, []), "-mca": (2, [])}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="poprun", allow_abbrev=False,
        description="Run COMMAND as the instances of a multi-replica PopXL job (xlgraph's "
                    "poprun, over MPI).")
    parser.add_argument("--num-instances", type=at_least_one, default=1,
                        help="processes to start (default 1)")
    parser.add_argument("--num-replicas", type=at_least_one, required=True,
                        help="replicas over all instances (a multiple of --num-instances)")
    parser.add_argument("--ipus-per-replica", type=at_least_one, default=1,
                        help="IPUs per replica: popdist.getNumIpusPerReplica() reports it")
    parser.add_argument("--mpi-global-args", type=_words, default="",
                        help="options for mpiexec")
    parser.add_argument("--mpi-local-args", type=_words, default="",
                        help="options for each instance")
    parser.add_argument("--host", "-H", default=None, help="hosts (mpiexec -hosts)")
    parser.add_argument("--only-output-from-instance", type=int, default=None,
                        help="show only this instance's output (the others' goes to /dev/null)")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="print the mpiexec command before running it")
    for name in HARDWARE_ONLY:
        parser.add_argument(name, default=None, help="accepted; no effect without IPUs")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the program and its args")
    return parser


def _words(text: str) -> list[str]:
    """An argparse type: an option string split as the shell splits it (an unbalanced quote
    is an error naming the option)."""
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc} in {text!r}") from None


def _hydra(words: list[str]) -> list[str]:
    """``words`` (OpenMPI options) as MPICH ``mpiexec`` options."""
    out: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word == "-x" and i + 1 < len(words):
            name, equals, value = words[i + 1].partition("=")
            out.extend(["-genv", name, value] if equals else [])
            i += 2
        elif word in _OPENMPI:
            count, hydra = _OPENMPI[word]
            out.extend(hydra)
            i += 1 + count
        else:
            out.append(word)
            i += 1
    return out


def poprun_command(argv: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """``(mpiexec command, environment)`` that ``poprun argv`` runs."""
    from xlgraph.popxl_compat import reach_children

    parser = _parser()
    args = parser.parse_args(list(argv))
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise SystemExit("poprun: no COMMAND given (poprun [options] python program.py ...)")
    if args.num_replicas % args.num_instances:
        raise SystemExit(f"poprun: --num-replicas {args.num_replicas} must be a multiple of "
                         f"--num-instances {args.num_instances}")
    options = _hydra(args.mpi_global_args) + _hydra(args.mpi_local_args)
    if args.host:
        options += ["-hosts", args.host]
    env = dict(os.environ)
    env[IPUS_PER_REPLICA] = str(args.ipus_per_replica)
    if args.only_output_from_instance is not None:
        if not 0 <= args.only_output_from_instance < args.num_instances:
            raise SystemExit(f"poprun: --only-output-from-instance "
                             f"{args.only_output_from_instance} is not an instance index (0 to "
                             f"{args.num_instances - 1})")
        env[OUTPUT_INSTANCE] = str(args.only_output_from_instance)
    reach_children(env, device="ipu_model")
    timeout = env.get(TIMEOUT, "60")
    try:
        at_least_one(timeout)
    except argparse.ArgumentTypeError as exc:  # poprun has no --timeout: name the variable
        parser.error(f"environment variable {TIMEOUT}: {exc}")
    launcher = ["--num-instances", str(args.num_instances),
                "--num-replicas", str(args.num_replicas),
                "--timeout", timeout, "--", *command]
    return mpiexec_command(launcher, options), env


def main(argv: Sequence[str] | None = None) -> int:
    """Run the job; returns its exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command, env = poprun_command(argv)
    if _parser().parse_args(argv).verbose:
        print("poprun:", shlex.join(command), file=sys.stderr, flush=True)
    return subprocess.call(command, env=env)


if __name__ == "__main__":
    sys.exit(main())
