"""The BLAS thread policy applied while a Session is attached.

OpenBLAS threading is fragile on small shared machines: measured on a 2-core machine
(``benchmarks/blas_threads.py``, figures in ``benchmarks/README.md``), two threads speed up the
MNIST step only when its matmuls are large (idle, 2026-11-25: batch 80 1.28x, batch 256 1.37x)
and the other core is free; when another process keeps one core busy, two threads collapse
(batch 80: 1.7-4x slower, batch 256: 1.5x slower than one thread), and at batch 8 they never
help. So ``"auto"`` uses one thread unless the program's largest matrix op (matmul,
convolution: the ops whose declared cost runs on the matrix engine) has at least
``PARALLEL_MIN_FLOPS`` and the machine looks free when the Session attaches (see
``machine_busy``); then BLAS keeps its own setting.
The limit needs the optional ``threadpoolctl`` (``pip install xlgraph[perf]``); without it the
policy does nothing. It holds while the Session is attached (``with session:``) and is restored
when it detaches. Conv and pooling kernels (``OpDef.threaded``) run their batch chunks on every
core under the same condition (a free core when the Session attaches), with BLAS at one thread.
The limit also reaches BLAS libraries loaded while attached (numba's, when the kernel thread
compiles a matrix product): the first run after the kernels swap in applies it again. A Session
with chunk threads also applies it again before each run if someone raised BLAS threads
meanwhile: numba's OpenMP threads and OpenBLAS's then fight for the cores (the seed-003 step ran
15-35x slower on 2 cores). To give BLAS the threads, pass ``chunk_threads=1`` and
``blas_threads``.
"""

from __future__ import annotations

import functools
import numbers
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from xlgraph.errors import ArgumentError, user_source_line
from xlgraph.ir import Ir

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

PARALLEL_MIN_FLOPS = 4e6  # a matrix op this large gains from a second BLAS thread (idle machine)


def largest_matrix_flops(ir: Ir) -> float:
    """Flops of the largest matrix-engine op (matmul, convolution) in ``ir``, from the ops'
    declared costs."""
    costs = (op.cost() for graph in ir.graphs for op in graph.ops
             if op.defn.cost is not None)  # family defaults never run on the matrix engine
    return max((c.flops for c in costs if c.matrix), default=0.0)


def machine_busy() -> bool:
    """Whether other processes leave no core free for a second BLAS thread: one is runnable
    right now besides this one (``/proc/loadavg``), or the 1-minute load average, this process
    included, reaches the number of cores."""
    cpus = os.cpu_count() or 1
    try:
        with open("/proc/loadavg") as f:
            fields = f.read().split()
        others, average = int(fields[3].split("/")[0]) - 1, float(fields[0])
    except (OSError, ValueError, IndexError):
        try:
            others, average = 0, os.getloadavg()[0]
        except OSError:
            return True
    return others >= cpus - 1 or average >= cpus


def machine_busy_once() -> Callable[[], bool]:
    """``machine_busy``, asked at most once: for the choices of one attach, which must agree."""
    return functools.cache(machine_busy)


def has_threaded_kernels(ir: Ir) -> bool:
    """Whether ``ir`` runs kernels that split their batch into chunks (``OpDef.threaded``)."""
    return any(op.defn.threaded for graph in ir.graphs for op in graph.ops)


def check_setting(value: object, what: str, none_ok: bool = False) -> None:
    """Refuse a thread setting that is not ``"auto"``, a whole number >= 1 (or None, when
    ``none_ok``): ``ArgumentError`` naming ``what``, the value and the user's line."""
    if isinstance(value, str) and value == "auto" or (none_ok and value is None):
        return
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1
    if not ok:
        allowed = '"auto", a whole number >= 1' + (" or None" if none_ok else "")
        raise ArgumentError(f"{what} must be {allowed}, got {value!r} [at {user_source_line()}]")


def choose_chunk_threads(setting: int | str, threaded: bool,
                         busy: Callable[[], bool] | None = None) -> int:
    """Threads for the batch chunks of conv and pooling kernels: with ``"auto"``, every core
    when the program has such kernels and the machine has a free core (``busy``, by default
    ``machine_busy``), else one. (numpy releases the GIL inside its kernels, so the chunks run
    on separate cores.) With more than one, the Session gives BLAS one thread: the chunks are
    the parallelism."""
    if setting != "auto":
        return max(1, int(setting))
    return (os.cpu_count() or 1) if threaded and not (busy or machine_busy)() else 1


def choose_threads(setting: int | str | None, flops: float,
                   busy: Callable[[], bool] | None = None) -> int | None:
    """The BLAS thread limit for a Session (``None``: leave BLAS as it is); ``busy`` as in
    ``choose_chunk_threads``."""
    if setting is None or setting != "auto":
        return None if setting is None else int(setting)
    if flops >= PARALLEL_MIN_FLOPS and not (busy or machine_busy)():
        return None
    return 1


class ThreadLimit:
    """Limits BLAS threads from ``apply()`` until ``restore()``; a no-op without threadpoolctl."""

    def __init__(self) -> None:
        self._limits: Any = None
        self._threads: int | None = None
        self._libraries: list[Any] = []  # threadpoolctl's controllers of the limited libraries
        self._counts: list[Any] = []  # what they reported right after the limit
        self.stale = False  # a BLAS library may have loaded since apply(): hold() before a run

    def apply(self, threads: int | None) -> None:
        if threads is None:
            return
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:
            return
        blas = ThreadpoolController().select(user_api="blas")
        self._threads, self._libraries = threads, blas.lib_controllers
        self._limits = blas.limit(limits=threads)
        self._counts = self._reported()

    def mark_stale(self) -> None:
        """Ask the next ``hold`` to limit every BLAS library again (the kernel thread calls it
        when it loaded numba's; it holds no reference to the Session)."""
        self.stale = True

    def hold(self) -> None:
        """Before a run: apply the limit again if a BLAS library loaded since (``stale``) or if
        one was set to another thread count since (about 0.3 us a library to check). Called on
        the thread that runs the step: OpenBLAS ignored the limit set from the kernel thread.
        ``restore`` still gives each library its setting from before the Session attached."""
        stale, self.stale = self.stale, False
        if self._limits is None:
            return
        if stale or self._reported() != self._counts:
            self._limits.restore_original_limits()
            self.apply(self._threads)

    def _reported(self) -> list[Any]:
        """Each limited library's thread count as it reports it (an OpenBLAS built on OpenMP
        reports OpenMP's, which may differ from the limit: so compare with what it reported
        right after the limit, not with the limit)."""
        return [lib.get_num_threads() for lib in self._libraries]

    def restore(self) -> None:
        if self._limits is not None:
            self._limits.restore_original_limits()
            self._limits = None
            self._libraries, self._counts = [], []


class ChunkPool:
    """A Session's threads for the batch chunks of conv and pooling kernels: started when it
    attaches with more than one chunk thread, shut down when it detaches. Each Session has its
    own, so Sessions with different settings in one process do not affect each other."""

    def __init__(self) -> None:
        self.executor: ThreadPoolExecutor | None = None

    def start(self, count: int) -> None:
        if count > 1 and self.executor is None:
            from concurrent.futures import ThreadPoolExecutor  # off `import xlgraph`

            self.executor = ThreadPoolExecutor(count, thread_name_prefix="xlgraph-chunks")

    def stop(self) -> None:
        if self.executor is not None:
            self.executor.shutdown()
            self.executor = None
