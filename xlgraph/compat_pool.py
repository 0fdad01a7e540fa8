"""A ``multiprocessing`` Pool whose worker dies fails its pending tasks instead of hanging.

The standard Pool replaces a worker that ends without finishing (it could not start, crashed or
was killed) and waits for ever for the tasks it held: a spawned worker whose main module fails
to import (say, ``No module named 'popxl'``) is replaced again and again while ``map`` never
returns. ``guard_pools()``, which the PopXL runner (``python -m xlgraph.popxl_compat``) and
``poprun`` apply, makes every Pool of the process behave like ``concurrent.futures``' process
pools instead: the first worker that ends with a non-zero exit status breaks the pool. Each
pending task then fails with ``WorkerProcessError`` (naming the worker and its status; what
the worker printed is on stderr above), no new worker starts, and submitting to the broken pool
raises it at once.
"""

from __future__ import annotations

import threading
from typing import Any

from xlgraph.errors import WorkerProcessError

__all__ = ["guard_pools", "WorkerProcessError"]

_local = threading.local()  # the cache and result queue of the pool whose worker handler runs
_BROKEN = "xlgraph_broken"  # attribute set on a broken pool's task cache: the error
_GUARDED = "_xlgraph_guarded"  # set on the Pool class once guard_pools has patched it


def _fail_pending(cache: dict, outqueue: Any, error: WorkerProcessError) -> None:
    """Fail every task in ``cache``: through the result queue, in order with real results, for
    ``apply``/``map`` results; under their own lock for ``imap`` iterators."""
    from multiprocessing import pool as mp_pool

    for job, result in list(cache.items()):
        if isinstance(result, mp_pool.IMapIterator):
            with result._cond:
                result._items.append((False, error))
                result._cond.notify()
            continue
        # a MapResult is done once each of its chunks has reported; extra reports are ignored
        for _ in range(max(getattr(result, "_number_left", 1), 1)):
            outqueue.put((job, 0, (False, error)))


def _check_broken(cache: dict) -> None:
    error = getattr(cache, _BROKEN, None)
    if error is not None:
        raise WorkerProcessError(f"this multiprocessing Pool is broken: {error}")


def guard_pools() -> None:
    """Make every ``multiprocessing`` Pool in this process fail its tasks with
    ``WorkerProcessError`` when a worker ends with a non-zero status (idempotent)."""
    from multiprocessing import pool as mp_pool

    Pool = mp_pool.Pool  # noqa: N806 - the class
    if getattr(Pool, _GUARDED, False):
        return
    handle_workers = Pool._handle_workers.__func__
    check_running = Pool._check_running

    def _handle_workers(cls: type, cache: dict, taskqueue: Any, ctx: Any, Process: Any,  # noqa: N803
                        processes: int, pool: list, inqueue: Any, outqueue: Any,
                        *rest: Any) -> None:
        _local.state = (cache, outqueue)
        handle_workers(cls, cache, taskqueue, ctx, Process, processes, pool, inqueue, outqueue,
                       *rest)

    def _maintain_pool(ctx: Any, Process: Any, processes: int, pool: list,  # noqa: N803
                       *rest: Any) -> None:
        # the standard cleanup, with each worker's exit status read once: a worker that ends
        # between a separate check and the cleanup would be replaced without a word
        cache, outqueue = getattr(_local, "state", (None, None))
        cleaned = False
        for i in reversed(range(len(pool))):
            worker = pool[i]
            code = worker.exitcode
            if code is None:
                continue
            worker.join()
            del pool[i]
            cleaned = True
            if code != 0 and cache is not None and getattr(cache, _BROKEN, None) is None:
                how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
                error = WorkerProcessError(
                    f"worker {worker.name} (pid {worker.pid}) {how} before its tasks were done "
                    f"(what it printed is above); the pool's pending tasks fail instead of "
                    f"waiting for ever")
                setattr(cache, _BROKEN, error)
                _fail_pending(cache, outqueue, error)
        if cleaned and (cache is None or getattr(cache, _BROKEN, None) is None):
            Pool._repopulate_pool_static(ctx, Process, processes, pool, *rest)

    def _check_running(self: Any) -> None:
        check_running(self)
        _check_broken(self._cache)

    Pool._handle_workers = classmethod(_handle_workers)
    Pool._maintain_pool = staticmethod(_maintain_pool)
    Pool._check_running = _check_running
    setattr(Pool, _GUARDED, True)
