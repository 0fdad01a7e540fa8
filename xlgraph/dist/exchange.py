"""Collectives between instances over MPI: contiguous buffers, no pickling, bounded waits.

Every exchange is an ``Iallgather`` of the instances' replica values: each instance then
reduces the full ``(replicas, ...)`` array with the same numpy code as a single process, so a
job's results equal the one-process run bit for bit (MPI's own reductions sum in an order that
depends on the number of processes). Waits poll with a deadline (``XLGRAPH_DIST_TIMEOUT``
seconds, default 60) and watch for failure notices: an instance that dies of a Python
exception tells the others, which stop at once with an error naming it; one that vanishes
without a word is reported when the deadline passes.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import numpy as np

from xlgraph.dist import TIMEOUT, _int_env
from xlgraph.errors import DistributedError

__all__ = ["MpiExchange", "import_mpi"]

FAILURE_TAG = 7301
_POLL_SECONDS = 0.0002


def import_mpi() -> Any:
    """``mpi4py.MPI``, or an ImportError naming the extra that provides it."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise ImportError("xlgraph.dist needs the 'dist' extra (mpi4py and an MPI): "
                          "pip install 'xlgraph[dist]'") from exc
    return MPI


class MpiExchange:
    """Swaps replica data between the instances of ``comm``."""

    def __init__(self, comm: Any, timeout: float) -> None:
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.timeout = timeout
        self._mpi = import_mpi()

    @classmethod
    def for_ir(cls, ir: Any) -> MpiExchange:
        """The exchange of this process's job; checks it matches ``ir``'s instances."""
        comm = import_mpi().COMM_WORLD
        if comm.Get_size() != ir.num_instances or comm.Get_rank() != ir.instance_index:
            raise DistributedError(
                f"the Ir expects instance {ir.instance_index} of {ir.num_instances} but MPI "
                f"runs rank {comm.Get_rank()} of {comm.Get_size()}; start the job with "
                f"xlgraph-run"
            )
        exchange = cls(comm, float(_int_env(TIMEOUT, 60)))
        exchange.report_failures()
        return exchange

    def allgather(self, local: np.ndarray) -> np.ndarray:
        """Every instance's ``local`` (all the same shape), stacked on axis 0."""
        out = np.empty((self.size * local.shape[0], *local.shape[1:]), local.dtype)
        request = self.comm.Iallgather(local.view(np.uint8).reshape(-1),
                                       out.view(np.uint8).reshape(-1))
        self._wait(request, f"all-gather of {local.dtype}{list(local.shape[1:])}")
        return out

    def _wait(self, request: Any, what: str) -> None:
        deadline = time.monotonic() + self.timeout
        while not request.Test():
            self._raise_on_notice(what)
            if time.monotonic() > deadline:
                raise DistributedError(
                    f"instance {self.rank}: the {what} got no data from every instance within "
                    f"{self.timeout:g} s (XLGRAPH_DIST_TIMEOUT); another instance has probably "
                    f"crashed"
                )
            time.sleep(_POLL_SECONDS)

    def _raise_on_notice(self, what: str) -> None:
        status = self._mpi.Status()
        if not self.comm.Iprobe(source=self._mpi.ANY_SOURCE, tag=FAILURE_TAG, status=status):
            return
        buffer = bytearray(status.Get_count(self._mpi.BYTE))
        self.comm.Recv([buffer, self._mpi.BYTE], source=status.Get_source(), tag=FAILURE_TAG)
        raise DistributedError(
            f"instance {self.rank}: stopped in the {what} because instance "
            f"{status.Get_source()} failed: {buffer.decode(errors='replace')}"
        )

    def notify_failure(self, message: str) -> None:
        """Tell every other instance that this one is failing with ``message``."""
        data = bytearray(message.encode()[:1000])
        requests = [self.comm.Isend([data, self._mpi.BYTE], dest=r, tag=FAILURE_TAG)
                    for r in range(self.size) if r != self.rank]
        deadline = time.monotonic() + 1.0  # small messages go eagerly; do not wait for long
        while requests and time.monotonic() < deadline:
            requests = [r for r in requests if not r.Test()]
            time.sleep(_POLL_SECONDS)

    def report_failures(self) -> None:
        """On an uncaught exception: print it, notify the other instances, then exit at once
        (MPI's finalisation would wait for instances that will never arrive)."""
        previous = sys.excepthook

        def hook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
            previous(kind, exc, tb)
            sys.stderr.flush()
            sys.stdout.flush()
            self.notify_failure(f"{kind.__name__}: {exc}")
            os._exit(1)

        sys.excepthook = hook
