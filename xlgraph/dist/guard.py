"""One instance of an ``xlgraph-run`` job: runs COMMAND and ends the whole job if it fails.

``mpiexec`` starts this guard once per instance; COMMAND runs as its child and is the MPI
process (it inherits the process-manager connection). When COMMAND exits with an error, the
guard waits a moment, so the other instances can report the failure themselves, then exits with
COMMAND's status: ``mpiexec`` then ends every other instance. This covers failures no Python
hook sees: an instance that dies before it starts MPI (its peers would wait in ``MPI_Init``
forever) or one killed by a signal. A guard that is stopped stops its COMMAND.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

from xlgraph.core.instances import TIMEOUT, int_env

OUTPUT_INSTANCE = "XLGRAPH_OUTPUT_INSTANCE"  # set by poprun --only-output-from-instance

__all__ = ["main"]

_GRACE_SECONDS = 2.0  # time the other instances get to report a failure themselves


def _die_with_parent() -> None:
    """In the child, before COMMAND starts: be killed when the guard dies (Linux), so that
    ``mpiexec`` ending a guard ends its instance too."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the guard's signal handlers still forward
        pass


def _abort_job(fds: tuple[int, ...], code: int) -> None:
    """Ask the process manager to end every instance (PMI's ``abort``): instances waiting in
    ``MPI_Init`` for one that failed before it started MPI would otherwise wait forever."""
    for fd in fds:
        try:
            os.write(fd, b"cmd=init pmi_version=1 pmi_subversion=1\n")
            os.write(fd, f"cmd=abort exitcode={code}\n".encode())
        except OSError:
            pass


def _silenced() -> int | None:
    """``subprocess.DEVNULL`` when the job shows only another instance's output (``poprun
    --only-output-from-instance``); the guard's own messages are still printed."""
    shown = os.environ.get(OUTPUT_INSTANCE)
    rank = os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK"))
    return subprocess.DEVNULL if shown is not None and rank is not None and shown != rank else None


def main(argv: Sequence[str] | None = None) -> int:
    """Run COMMAND (``argv``); returns its exit status (128 + signal when a signal ended it)."""
    command = list(sys.argv[1:] if argv is None else argv)
    fds = tuple(int(os.environ[k]) for k in ("PMI_FD",) if os.environ.get(k, "").isdigit())
    quiet = _silenced()
    child = subprocess.Popen(command, pass_fds=fds, preexec_fn=_die_with_parent,
                             stdout=quiet, stderr=quiet)

    def stop(signum: int, frame: object) -> None:
        child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, stop)
    status = child.wait()
    code = status if status >= 0 else 128 - status
    if status != 0:
        print(f"xlgraph-run: instance {os.environ.get('PMI_RANK', '?')} ended with exit status "
              f"{code}; stopping the job", file=sys.stderr, flush=True)
        time.sleep(min(_GRACE_SECONDS, int_env(TIMEOUT, 60)))
        _abort_job(fds, code)
    return code


if __name__ == "__main__":
    sys.exit(main())
