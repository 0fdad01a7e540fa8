"""What the numba backend adds for ``xlgraph.ops.window_parallel``'s loops: numba's ``prange``
bound to that module's name and its helpers made callable from compiled code (its ``gemm``:
``numba_blas``).

Imported by the backend when it compiles the first loop (numba is imported by then).
"""

from __future__ import annotations

import functools
import importlib

import numba
from numba.extending import register_jitable

from xlgraph.ops import window_parallel


@functools.cache
def threads_spin() -> bool:
    """Whether numba's parallel loops run on a thread team that waits by spinning (TBB or
    OpenMP, whichever numba would pick): numba's fallback team sleeps between loops, and on
    virtual machines waking it costs more than a small loop (about 100 us per loop measured
    on the benchmark machine, against 2 us with OpenMP)."""
    layer = numba.config.THREADING_LAYER
    if layer == "workqueue":
        return False
    for name in ("tbbpool", "omppool"):
        try:
            importlib.import_module(f"numba.np.ufunc.{name}")
        except ImportError:
            continue
        return True
    return False


@functools.cache
def bind() -> None:
    """Point ``window_parallel``'s ``prange`` at numba's and let compiled code call its
    helpers (once per process: they are module globals)."""
    window_parallel.prange = numba.prange
    for helper in window_parallel.HELPERS:
        register_jitable(helper)
