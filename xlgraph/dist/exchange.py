"""Collectives between instances over MPI: contiguous buffers, no pickling, checked, bounded.

Every exchange is an ``Iallgather`` of the instances' replica values: each instance then
reduces the full ``(replicas, ...)`` array with the same numpy code as a single process, so a
job's results equal the one-process run bit for bit (MPI's own reductions sum in an order that
depends on the number of processes).

Each collective starts with a fixed-size record (``RECORD_BYTES``) from every instance: a
header (the collective's number in this process, its sequence; what it is, ``all-reduce add``;
the dtype and shape of this instance's part) followed by the data itself when it fits
(``INLINE_BYTES``), so a small collective is still one exchange; larger data follows in a
second exchange once the headers agree. Instances whose headers differ combine nothing: every
instance raises a ``DistributedError`` naming its own collective and the other side's.
``benchmarks/dist_headers.py`` measures what the headers cost. The end of the program is
a header too (``finish``): an instance that ends waits for the others to end as well, so one
that fails after a peer has finished still ends the whole job.

Buckets (``start``, used by ``xlgraph.lower.buckets``) swap many collectives' data in one
exchange, begun while the program computes on: the header agreement comes first (one record,
describing every collective of the bucketed program), then the data travels on a communicator
of its own, where a progress thread (when MPI allows threads) drives it while the program runs.
Each bucket's all-gather is followed by an ``Ibarrier``: until it completes (a peer has not
begun the bucket yet) the bucket is polled with pauses; once it has, the data is driven without
pause (the thread blocks in ``Wait``, the GIL released), since MPI moves data between hosts, or
without CMA on one host, only inside MPI calls.
With that thread the header swap does not block either: the thread begins the data once the
headers agree, and a disagreement is raised where the program waits for the data. Where every
instance runs on one host, a bucket's rows lie in memory they all map instead
(``shared_rows``, ``publish``; ``xlgraph.dist.shared``): no MPI transfer, only flags to wait
for, after the same header swap.

Waits poll with a deadline (``XLGRAPH_DIST_TIMEOUT`` seconds, default 60) and watch for failure
notices: an instance that dies of a Python exception tells the others, which stop at once with
an error naming it; one that vanishes without a word is reported when the deadline passes. A
wait first spins on the exchange for ``SPIN_SECONDS`` (the other instance is usually close),
then sleeps between polls, from ``MIN_PAUSE`` doubling to ``MAX_PAUSE``, and looks for failure
notices every ``NOTICE_SECONDS``.
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from xlgraph.core.instances import TIMEOUT, int_env
from xlgraph.dist.shared import SharedRows, one_host_allowed, open_rows
from xlgraph.errors import DistributedError

__all__ = ["MpiExchange", "import_mpi"]

FAILURE_TAG = 7301
HEADER_BYTES = 256
RECORD_BYTES = 4096
INLINE_BYTES = RECORD_BYTES - HEADER_BYTES  # data up to this size travels with the header
_POLL_SECONDS = 0.0002  # between the sends of a failure notice
SPIN_SECONDS = 5e-5
MIN_PAUSE, MAX_PAUSE = 2e-5, 5e-4
NOTICE_SECONDS = 0.01
_JOB: MpiExchange | None = None  # one per process: the collective sequence spans Sessions


def import_mpi() -> Any:
    """``mpi4py.MPI``, or an ImportError naming the extra that provides it."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise ImportError("xlgraph.dist needs the 'dist' extra (mpi4py and an MPI): "
                          "pip install 'xlgraph[dist]'") from exc
    return MPI


def _describe(what: str, local: np.ndarray | None) -> str:
    return what if local is None else f"{what} of {local.dtype}{list(local.shape[1:])}"


def _header(seq: int, text: str) -> np.ndarray:
    """``text`` (with the sequence and a checksum, so a cut-off text still compares exactly)
    as ``HEADER_BYTES`` bytes."""
    body = f"#{seq}: {text}".encode(errors="replace")
    record = f"{zlib.crc32(body):08x}".encode() + body
    return np.frombuffer(record[:HEADER_BYTES].ljust(HEADER_BYTES, b"\0"), np.uint8)


def _text(header: np.ndarray) -> str:
    return header.tobytes().rstrip(b"\0")[8:].decode(errors="replace")


class MpiExchange:
    """Swaps replica data between the instances of ``comm``."""

    def __init__(self, comm: Any, timeout: float, check_headers: bool = True) -> None:
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.timeout = timeout
        self.check_headers = check_headers
        self.sequence = 0
        self._mpi = import_mpi()
        self._buckets: Any = None  # the communicator of bucket data, made at the first bucket
        threads = self._mpi.Query_thread() == self._mpi.THREAD_MULTIPLE
        self._progress = _Progress() if threads else None
        self._share = self.size > 1 and one_host_allowed()  # until a block cannot be shared

    @classmethod
    def for_ir(cls, ir: Any) -> MpiExchange:
        """The exchange of this process's job (made once); checks it matches ``ir``'s instances."""
        global _JOB
        comm = import_mpi().COMM_WORLD
        if comm.Get_size() != ir.num_instances or comm.Get_rank() != ir.instance_index:
            raise DistributedError(
                f"the Ir expects instance {ir.instance_index} of {ir.num_instances} but MPI "
                f"runs rank {comm.Get_rank()} of {comm.Get_size()}; start the job with "
                f"xlgraph-run"
            )
        if _JOB is None:
            _JOB = cls(comm, float(int_env(TIMEOUT, 60)))
            _JOB.report_failures()
        return _JOB

    def allgather(self, local: np.ndarray, what: str = "collective") -> np.ndarray:
        """Every instance's ``local`` (all the same shape), stacked on axis 0; ``what`` names
        the collective in the header and in errors."""
        described = _describe(what, local)
        self.sequence += 1
        out = np.empty((self.size * local.shape[0], *local.shape[1:]), local.dtype)
        data = local.view(np.uint8).reshape(-1)
        if self.check_headers:
            records = self._agree(described, data if data.size <= INLINE_BYTES else None)
            if data.size <= INLINE_BYTES:
                out.view(np.uint8).reshape(self.size, -1)[:] = \
                    records[:, HEADER_BYTES:HEADER_BYTES + data.size]
                return out
        request = self.comm.Iallgather(data, out.view(np.uint8).reshape(-1))
        self._poll(request.Test, described, self.comm.Ibarrier().Test)
        return out

    def _record(self, described: str, inline: np.ndarray | None = None,
                ) -> tuple[np.ndarray, np.ndarray]:
        """This instance's record (the header, then ``inline`` data) and the buffer for every
        instance's."""
        mine = np.zeros(RECORD_BYTES, np.uint8)
        mine[:HEADER_BYTES] = _header(self.sequence, described)
        if inline is not None:
            mine[HEADER_BYTES:HEADER_BYTES + inline.size] = inline
        return mine, np.empty((self.size, RECORD_BYTES), np.uint8)

    def _compare(self, records: np.ndarray, sequence: int) -> None:
        """Raise in this instance when any other instance's header in ``records`` differs from
        its own (collective number ``sequence``)."""
        header = records[self.rank, :HEADER_BYTES]
        for other in range(self.size):
            if not np.array_equal(records[other, :HEADER_BYTES], header):
                raise DistributedError(
                    f"instance {self.rank}: the instances disagree on collective "
                    f"#{sequence}: this instance runs {_text(header)!r}, instance {other} "
                    f"runs {_text(records[other, :HEADER_BYTES])!r}; every instance must run the "
                    f"same program on data of the same shapes, so nothing was combined")

    def _agree(self, described: str, inline: np.ndarray | None = None) -> np.ndarray:
        """Swap records (header, then ``inline`` data); raise in this instance when any other
        instance's header differs. Returns every instance's record."""
        mine, records = self._record(described, inline)
        self._wait(self.comm.Iallgather(mine, records), described)
        self._compare(records, self.sequence)
        return records

    def finish(self) -> None:
        """At exit: wait (at most the timeout) until every instance has ended its program; an
        instance still in a collective, or one that failed, ends this one with an error."""
        self.sequence += 1
        self._agree("finish (the program ended)")

    def start(self, local: np.ndarray, out: np.ndarray, what: str,
              agree: str | None = None) -> Callable[[], np.ndarray]:
        """Begin an all-gather of ``local`` (bytes, the same count in every instance) into
        ``out``, ``(instances, bytes)``; returns the function that waits for it and returns
        ``out``. ``local`` may be ``out[rank]`` itself (MPI then sends it in place). ``agree``:
        first swap a header with that text, as every collective does (with the progress thread,
        without blocking: the data, and every later bucket's, begins once the headers agree;
        a disagreement is raised by the wait); without it the call relies on an earlier
        agreement on the whole program. ``what`` names the exchange in errors."""
        gate = check = None
        if agree is not None:
            self.sequence += 1
            small = local.size <= INLINE_BYTES
            if small or self._progress is None:
                records = self._agree(agree, local if small else None)
                if small:
                    out[:] = records[:, HEADER_BYTES:HEADER_BYTES + local.size]
                    return lambda: out
            else:
                mine, records = self._record(agree)
                gate = self.comm.Iallgather(mine, records)
                check = functools.partial(self._compare, records, self.sequence)
        if self._buckets is None:  # made by every instance at its first bucket
            self._buckets, made = self.comm.Idup()
            self._wait(made, f"{what} (its communicator)")
        send = self._mpi.IN_PLACE if np.may_share_memory(local, out) else local

        def issue() -> tuple[Any, Any]:  # the data, then every instance's arrival at it
            request = self._buckets.Iallgather(send, out)
            return request, self._buckets.Ibarrier()

        if self._progress is None:
            request, begun = issue()

            def wait() -> np.ndarray:
                self._poll(request.Test, what, begun.Test)
                return out

            return wait
        pending = self._progress.launch(issue, gate, check)

        def wait_threaded() -> np.ndarray:
            deadline = time.monotonic() + self.timeout
            while not pending.done.wait(NOTICE_SECONDS):
                self._raise_on_notice(what)
                if time.monotonic() > deadline:
                    raise self._late(what)
            if isinstance(pending.error, DistributedError):  # the headers disagree
                raise pending.error
            if pending.error is not None:
                raise DistributedError(f"instance {self.rank}: the {what} failed in MPI: "
                                       f"{pending.error}") from pending.error
            return out

        return wait_threaded

    def shared_rows(self, nbytes: int, what: str, agree: str | None) -> SharedRows | None:
        """At a bucket's first start: its two buffers of ``nbytes`` bytes per instance in memory
        that every instance maps (``xlgraph.dist.shared``), or None where they cannot be (then
        never again in this job). ``agree``: first swap that header, blocking (as the first
        bucket of every run does), so that the blocks are made only between instances that
        agree. Collective."""
        if not self._share or nbytes <= INLINE_BYTES:
            return None
        if agree is not None:
            self.sequence += 1
            self._agree(agree)

        def gather(local: np.ndarray, purpose: str) -> np.ndarray:  # agreed above: no header
            out = np.empty((self.size, *local.shape), local.dtype)
            self._wait(self.comm.Iallgather(local, out), f"{what} ({purpose})")
            return out

        rows = open_rows(gather, self.rank, self.size, nbytes)
        self._share = rows is not None
        return rows

    def publish(self, rows: SharedRows, what: str, agree: str | None = None,
                ) -> Callable[[], np.ndarray]:
        """Publish this instance's row of ``rows``' next buffer (written by now); returns the
        function that waits until every instance has published its row there and returns that
        buffer. ``agree``: as ``start``'s (the header swap begins now, and is checked before
        the wait for the rows)."""
        gate = records = None
        sequence = self.sequence
        if agree is not None:
            self.sequence = sequence = sequence + 1
            mine, records = self._record(agree)
            gate = self.comm.Iallgather(mine, records)
        buffer = rows.turn()
        count = rows.publish()

        def wait() -> np.ndarray:
            if gate is not None:
                self._wait(gate, what)
                self._compare(records, sequence)
            self._poll(lambda: rows.ready(count), what)
            return buffer

        return wait

    def _late(self, what: str) -> DistributedError:
        return DistributedError(
            f"instance {self.rank}: the {what} got no data from every instance within "
            f"{self.timeout:g} s (XLGRAPH_DIST_TIMEOUT); another instance has probably crashed")

    def _wait(self, request: Any, what: str) -> None:
        """Until MPI ``request`` completes (``_poll``)."""
        self._poll(request.Test, what)

    def _poll(self, done: Callable[[], bool], what: str,
              begun: Callable[[], bool] | None = None) -> None:
        """Until ``done()`` (and ``begun()``, when given: every instance has begun the exchange;
        MPI forbids leaving its request active): spin, then sleep between polls (no longer once
        ``begun()``); stop at a failure notice or the deadline."""
        start = time.monotonic()
        deadline, check, pause = start + self.timeout, start, MIN_PAUSE
        arrived = False
        while True:
            if begun is not None and not arrived:
                arrived = begun()
            if done() and (arrived or begun is None):
                return
            now = time.monotonic()
            if now >= check:
                self._raise_on_notice(what)
                if now > deadline:
                    raise self._late(what)
                check = now + NOTICE_SECONDS
            if now - start > SPIN_SECONDS and not arrived:
                time.sleep(pause)
                pause = min(2 * pause, MAX_PAUSE)

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

    def _fail(self, message: str) -> None:
        """Print, notify the other instances, then exit at once (MPI's finalisation would wait
        for instances that will never arrive)."""
        sys.stderr.flush()
        sys.stdout.flush()
        self.notify_failure(message)
        os._exit(1)

    def report_failures(self) -> None:
        """On an uncaught exception: print it and fail (``_fail``). At a normal exit: ``finish``
        first, failing if the other instances do not end too."""
        previous = sys.excepthook

        def hook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
            previous(kind, exc, tb)
            self._fail(f"{kind.__name__}: {exc}")

        def at_exit() -> None:
            try:
                self.finish()
            except DistributedError as exc:
                print(f"DistributedError: {exc}", file=sys.stderr)
                self._fail(f"DistributedError: {exc}")

        sys.excepthook = hook
        atexit.register(at_exit)  # runs before mpi4py's MPI_Finalize (registered earlier)


class _Pending:
    """An exchange the progress thread drives: ``done`` is set when it has ended (``error``:
    the exception MPI raised, or the headers' disagreement, if any); ``begun``: the request
    that completes once every instance has begun it (None after that)."""

    def __init__(self) -> None:
        self.request: Any = None
        self.begun: Any = None
        self.done = threading.Event()
        self.error: BaseException | None = None


class _Progress:
    """A daemon thread that drives the exchanges in flight, so that MPI moves their data while
    the program computes (MPICH progresses a non-blocking collective only inside MPI calls).
    It polls them with pauses while an instance has not begun them (a blocking wait would spin
    a core), and blocks in ``Wait`` for one that every instance has begun. It also begins the
    exchanges that wait for a header swap (``launch``), in the order they were launched, once
    the headers agree."""

    def __init__(self) -> None:
        self._work: list[_Pending] = []
        self._queue: list[tuple[_Pending, Any, Callable[[], None] | None,
                                Callable[[], Any]]] = []  # launches waiting for their gate
        self._ready = threading.Condition()
        self._thread: threading.Thread | None = None

    def launch(self, issue: Callable[[], Any], gate: Any = None,
               check: Callable[[], None] | None = None) -> _Pending:
        """The exchange that ``issue()`` begins (it returns the MPI requests of the data and of
        every instance's arrival, as ``MpiExchange.start``'s): at once, or,
        after ``gate`` (an MPI request) has completed and ``check()`` has not raised, and after
        every earlier launch has begun; one that cannot begin ends with that error (as does
        every launch after it)."""
        pending = _Pending()
        with self._ready:
            if gate is None and not self._queue:
                pending.request, pending.begun = issue()
                self._work.append(pending)
            else:
                self._queue.append((pending, gate, check, issue))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="xlgraph-dist-progress",
                                                daemon=True)
                self._thread.start()
            self._ready.notify()
        return pending

    def _begin(self) -> None:
        """Begin the queued launches whose gates have completed, in order (holding the lock)."""
        while self._queue:
            pending, gate, check, issue = self._queue[0]
            try:
                if gate is not None and not gate.Test():
                    return
                if check is not None:
                    check()
                pending.request, pending.begun = issue()
            except Exception as exc:  # noqa: BLE001 - ends this launch and every later one
                for later, *_ in self._queue:
                    later.error = exc
                    later.done.set()
                self._queue.clear()
                return
            self._queue.pop(0)
            self._work.append(pending)

    def _run(self) -> None:
        pause = MIN_PAUSE
        while True:
            with self._ready:
                while not self._work and not self._queue:
                    self._ready.wait()
                    pause = MIN_PAUSE
                self._begin()
                work = list(self._work)
            ended = [p for p in work if _ended(p, lambda r: r.Test())]
            if not ended:  # block for one that every instance has begun: no pause in its data
                ended = [p for p in work if p.begun is None][:1]
                if ended:
                    _ended(ended[0], lambda r: r.Wait() or True)
            if ended:
                with self._ready:
                    self._work = [p for p in self._work if p not in ended]
                pause = MIN_PAUSE
            else:
                time.sleep(pause)
                pause = min(2 * pause, MAX_PAUSE)


def _ended(pending: _Pending, finished: Callable[[Any], bool]) -> bool:
    """Whether ``pending`` has ended: every instance has begun it (its ``begun`` request, which
    must not be left active, has completed) and ``finished(request)``; then marks it done (an
    MPI error ends it, for the waiting thread to raise)."""
    try:
        if pending.begun is not None and pending.begun.Test():
            pending.begun = None
        if pending.begun is not None or not finished(pending.request):
            return False
    except Exception as exc:  # noqa: BLE001 - an MPI error: the waiting thread raises it
        pending.error = exc
    pending.done.set()
    return True
