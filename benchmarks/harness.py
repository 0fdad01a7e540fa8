"""Timing helpers shared by the benchmarks: medians of repeated loops, BLAS thread control."""

from __future__ import annotations

import os
import platform
import random
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any


def time_per_call(fn: Callable[[int], Any], calls: int, repeats: int = 7,
                  warmup: int = 3) -> float:
    """Median over ``repeats`` loops of the mean microseconds per ``fn(i)`` call."""
    return interleaved({"fn": fn}, calls, repeats, warmup)["fn"]["median"]


def interleaved(fns: dict[str, Callable[[int], Any]], calls: int, rounds: int = 7,
                warmup: int = 3, timer: Callable[[], float] = time.perf_counter,
                ) -> dict[str, dict[str, float]]:
    """Time several step functions in interleaved rounds (one loop of ``calls`` each per round),
    so that load from other processes hits them alike. Each round runs them in another
    (seeded, shuffled) order, so that none always follows the same one: the loop right after
    torch's or JAX's runs while their worker threads still spin on the cores. Returns, per
    name, the median and the minimum over rounds of the mean microseconds per step.

    A step function may carry two attributes: ``finish()``, called once at the end of each
    timed loop and timed with it (an asynchronous contender waits there for its queued work),
    and ``steps`` (default 1), the training steps one call runs (a device loop): times are
    per step, not per call. ``timer``: wall time, or ``time.thread_time`` for the CPU time of
    this thread (what the machine's load moves least).
    """
    def finish(fn: Callable[[int], Any]) -> None:
        done = getattr(fn, "finish", None)
        if done is not None:
            done()

    for fn in fns.values():
        for i in range(warmup):
            fn(i)
        finish(fn)
    loops: dict[str, list[float]] = {name: [] for name in fns}
    names, order = list(fns), random.Random(0)
    for _ in range(rounds):
        order.shuffle(names)
        for name in names:
            fn = fns[name]
            start = timer()
            for i in range(calls):
                fn(i)
            finish(fn)
            steps = calls * getattr(fn, "steps", 1)
            loops[name].append((timer() - start) / steps * 1e6)
    return {name: {"median": round(statistics.median(v), 1), "min": round(min(v), 1)}
            for name, v in loops.items()}


def calls_for(batch: int, budget_us: float = 300_000.0, per_sample_us: float = 4.0) -> int:
    """A loop length that keeps one timed loop near ``budget_us`` for this batch size."""
    return max(20, int(budget_us / (30.0 + per_sample_us * batch)))


def blas_threads(n: int | None) -> AbstractContextManager[Any]:
    """Limit BLAS to ``n`` threads (threadpoolctl); ``None`` leaves the library default."""
    if n is None:
        return nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=n, user_api="blas")


# The CPU flags that decide the arithmetic's speed (vector widths, float16 conversions and
# arithmetic, bfloat16 and matrix units), reported with every figure.
VECTOR_FLAGS = ("avx", "fma", "f16c", "amx", "sse4")


def xlgraph_blas() -> str:
    """The BLAS of xlgraph's large float32/float64 products in this process: ``"mkl"`` (the
    ``mkl`` extra, unless ``XLGRAPH_BLAS=openblas``) or ``"openblas"`` (numpy's)."""
    from xlgraph.ops import mkl

    return "openblas" if mkl.library() is None else "mkl"


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    info: dict[str, Any] = {"python": platform.python_version(), "cpus": os.cpu_count(),
                            "load_avg_1m": round(os.getloadavg()[0], 2)}
    try:
        import numpy as np
        from threadpoolctl import threadpool_info

        info["numpy"] = np.__version__
        info["blas"] = [{k: b.get(k) for k in ("internal_api", "version", "architecture",
                                                "num_threads")} for b in threadpool_info()]
    except ImportError:
        pass
    info["xlgraph_blas"] = xlgraph_blas()  # loads MKL where it will multiply (numpy's: above)
    for key in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS", "XLGRAPH_BLAS"):
        if key in os.environ:
            info[key] = os.environ[key]
    try:
        with open("/proc/cpuinfo") as f:
            lines = f.read().splitlines()
        info["cpu"] = next(line.split(":", 1)[1].strip() for line in lines
                           if line.startswith("model name"))
        flags = next(line.split(":", 1)[1].split() for line in lines if line.startswith("flags"))
        info["cpu_flags"] = sorted(f for f in flags if f.startswith(VECTOR_FLAGS))
    except (OSError, StopIteration):
        pass
    return info
