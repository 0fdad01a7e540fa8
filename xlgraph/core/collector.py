"""Python's cyclic garbage collector paused while a transform builds a large graph in one go.

Building a subgraph (``Ir.create_graph``), differentiating (``autodiff``, ``grad_of_call``) and
lowering a program (``Session``) allocate millions of small objects that stay alive
(tensors, ops, steps, plan entries); with the collector running, every collection re-walks the
young ones and each full collection all of them, about 40% of the time at 10000 layers
(``benchmarks/scaling.py``). The collector is paused for the duration of such a transform and
turned back on as it was when the transform ends, so nothing outlives the call. Reference
counting still frees every acyclic object at once; cyclic garbage made meanwhile is freed by
the collections after the pause.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["collector_paused"]

F = TypeVar("F", bound=Callable[..., Any])


def collector_paused(fn: F) -> F:
    """Decorate ``fn`` to run with the cyclic collector paused, re-enabled after only if it was
    on. Nested and concurrent pauses compose: only a pause that found the collector on turns it
    back on, so it ends on once every pause that found it on has ended. (A plain wrapper, not
    ``contextlib``: its frame is inside xlgraph, so ``user_source_line`` still finds the user's.)
    """

    @functools.wraps(fn)
    def paused(*args: Any, **kwargs: Any) -> Any:
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was_enabled:
                gc.enable()

    return paused  # type: ignore[return-value]
