"""``merge_exchange()`` and ``io_tile_exchange()``: PopXL's exchange-merging scopes.

On the IPU, host and remote transfers created in one ``merge_exchange`` scope become a single
exchange. The simulator's values do not depend on it; ops created in the scope carry
``op.hints["exchange_group"]`` (one id per scope) for the ipu_model's exchange accounting.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator

from xlgraph.context import in_sequence, io_tiles, op_hints

__all__ = ["merge_exchange", "io_tile_exchange"]

_group_ids = itertools.count()


@contextlib.contextmanager
def merge_exchange() -> Iterator[None]:
    """Merge the host and remote transfers created inside into one exchange."""
    with op_hints(exchange_group=next(_group_ids)):
        yield


@contextlib.contextmanager
def io_tile_exchange(verify_overlap: bool = True) -> Iterator[None]:
    """``io_tiles()`` + ``merge_exchange()`` + ``in_sequence(False)``: transfers created inside
    run on the IO tiles as one exchange that may overlap compute.

    ``verify_overlap`` is accepted for PopXL compatibility; the simulator does not model
    overlap, so there is nothing to verify.
    """
    with io_tiles(), merge_exchange(), in_sequence(False):
        yield
