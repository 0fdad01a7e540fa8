"""Python's cyclic garbage collector paused while a transform builds a large graph in one go.

Building a subgraph (``Ir.create_graph``), differentiating (``autodiff``, ``grad_of_call``) and
lowering a program (``Session``) allocate millions of small objects that stay alive
(tensors, ops, steps, plan entries); with the collector running, every collection re-walks the
young ones and each full collection all of them, about 40% of the time at 10000 layers
(``benchmarks/scaling.py``). The collector is paused for the duration of such a transform and
turned back on as it was when the transform ends, so nothing outlives the call. Reference
counting still frees every acyclic object at once; cyclic garbage made meanwhile is freed by
the collections after the pause.

A pause only defers the walk: the objects a transform made are still young when it ends, so
the next young collections walk every one of them and move them on, generation by generation
(a cost that grows faster than the program: at 800 layers the build's collections after its
pauses took a fifth of its time). So a pause that saw at least ``SETTLE_MIN_OBJECTS`` new
objects settles them when it ends: every tracked object moves to the oldest generation at
once (``gc.freeze()`` then ``gc.unfreeze()``, two list splices, no walk), where only full
collections look. Cyclic garbage among them then waits for the next full collection. Nothing
settles while the process keeps objects frozen itself (``gc.freeze()``): the unfreeze would
release them.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["collector_paused", "SETTLE_MIN_OBJECTS"]

F = TypeVar("F", bound=Callable[..., Any])

# New tracked objects (the youngest generation's count) from which a pause settles them: a
# young collection walks this many in about a millisecond, so below it nothing changes.
SETTLE_MIN_OBJECTS = 20_000


def _settle() -> None:
    """Move every tracked object to the oldest generation, unless some are frozen already."""
    if gc.get_count()[0] >= SETTLE_MIN_OBJECTS and not gc.get_freeze_count():
        gc.freeze()
        gc.unfreeze()


def collector_paused(fn: F) -> F:
    """Decorate ``fn`` to run with the cyclic collector paused, re-enabled after only if it was
    on (settling a large transform's objects first, see the module docstring). Nested and
    concurrent pauses compose: only a pause that found the collector on turns it back on, so it
    ends on once every pause that found it on has ended. (A plain wrapper, not
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
                _settle()
                gc.enable()

    return paused  # type: ignore[return-value]
